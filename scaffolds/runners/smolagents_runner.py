"""Run one task with a smolagents ToolCallingAgent that has a shell tool.

Launched by Forge's ``smolagents`` scaffold with the agent's own venv python;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the model at the Forge gateway.
Prints the agent's final answer on stdout.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=20)
    args = parser.parse_args()

    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output.

        Args:
            command: the command line to run with /bin/sh.
        """
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    model = OpenAIServerModel(
        model_id=args.model, api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"]
    )
    agent = ToolCallingAgent(tools=[shell], model=model, max_steps=args.max_steps)
    print(agent.run(args.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main())
