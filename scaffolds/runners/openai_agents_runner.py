"""Run one task with an OpenAI Agents SDK agent that has a shell tool.

Launched by Forge's ``openai-agents`` scaffold with the agent's own venv python;
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` point the SDK at the Forge gateway.
Prints the agent's final output on stdout; exits 1 if the run raised.
"""

from __future__ import annotations

import argparse
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-turns", type=int, default=20)
    args = parser.parse_args()

    from agents import Agent, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)

    @function_tool
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output."""
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    agent = Agent(
        name="forge-agent",
        instructions="Solve the task. Use the shell tool to run commands. Reply with the final answer.",
        tools=[shell],
        model=args.model,
    )
    result = Runner.run_sync(agent, args.prompt, max_turns=args.max_turns)
    print(result.final_output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
