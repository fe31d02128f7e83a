"""Run one task with an agno ``Agent`` and a shell tool, its model agno's ``Ollama`` on the gateway's Ollama API.

Launched by Forge's ``agno`` scaffold with the agent's own venv python; ``OLLAMA_HOST`` is the gateway
(``/api/chat`` under it) and ``OLLAMA_API_KEY`` the trajectory's key, sent as a bearer token. Prints the
agent's final answer last.
"""

from __future__ import annotations

import argparse
import os
import subprocess


def shell(command: str) -> str:
    """Run a shell command in the working folder and return its output.

    Args:
        command: the command line to run with /bin/sh.
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    args = parser.parse_args()

    from agno.agent import Agent
    from agno.models.ollama import Ollama

    model = Ollama(id=args.model, host=os.environ["OLLAMA_HOST"], api_key=os.environ["OLLAMA_API_KEY"])
    agent = Agent(model=model, tools=[shell], telemetry=False,
                  instructions="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    print(agent.run(args.prompt).content)


if __name__ == "__main__":
    main()
