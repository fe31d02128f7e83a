"""Run one task with a pydantic-ai ``Agent`` that has a shell tool, its model the gateway's (Chat Completions).

Launched by Forge's ``pydantic-ai`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
"""

from __future__ import annotations

import argparse
import os
import subprocess

INSTRUCTIONS = "You are a coding agent working in the current folder. Use the shell tool to do the task, then say what you did."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    args = parser.parse_args()

    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    agent = Agent(OpenAIChatModel(args.model, provider=provider), instructions=INSTRUCTIONS)

    @agent.tool_plain
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output.

        Args:
            command: the command line to run with /bin/sh.
        """
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    print(agent.run_sync(args.prompt).output)


if __name__ == "__main__":
    main()
