"""Run one task with a CrewAI crew of one ``Agent`` with a shell tool, its LLM the gateway's (Chat Completions).

Launched by Forge's ``crewai`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point CrewAI's LLM (LiteLLM's OpenAI provider) at the Forge gateway. Telemetry is off
(``CREWAI_DISABLE_TELEMETRY``, ``OTEL_SDK_DISABLED``). Prints the crew's final answer last.
"""

from __future__ import annotations

import argparse
import os
import subprocess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=10)
    args = parser.parse_args()

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("shell")
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output."""
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    llm = LLM(model=f"openai/{args.model}", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    agent = Agent(role="coding agent", goal="Do the task in the current folder with the shell tool.",
                  backstory="You work in a terminal.", tools=[shell], llm=llm, allow_delegation=False,
                  max_iter=args.max_steps, verbose=False)
    task = Task(description=args.prompt, expected_output="What you did.", agent=agent)
    print(Crew(agents=[agent], tasks=[task], verbose=False).kickoff())


if __name__ == "__main__":
    main()
