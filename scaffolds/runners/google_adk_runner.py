"""Run one task with a Google ADK ``Agent`` (Gemini model, a shell tool) on the gateway's Gemini API.

Launched by Forge's ``google-adk`` scaffold with the agent's own venv python; ``GOOGLE_GEMINI_BASE_URL``
is the gateway (google-genai's own setting) and ``GOOGLE_API_KEY`` the trajectory's key. Prints the
agent's final answer last.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess


def shell(command: str) -> str:
    """Run a shell command in the working folder and return its output.

    Args:
        command: the command line to run with /bin/sh.
    """
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"


async def run(model: str, prompt: str) -> str:
    from google.adk.agents import Agent
    from google.adk.models.google_llm import Gemini
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    # a Gemini model object, not a name: ADK's registry knows only names like gemini-*
    agent = Agent(name="forge_agent", model=Gemini(model=model), tools=[shell],
                  instruction="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    runner = InMemoryRunner(agent=agent, app_name="forge")
    session = await runner.session_service.create_session(app_name="forge", user_id="forge")
    message = types.Content(role="user", parts=[types.Part(text=prompt)])
    final = ""
    async for event in runner.run_async(user_id="forge", session_id=session.id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            final = "".join(part.text or "" for part in event.content.parts)
    return final


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    args = parser.parse_args()
    print(asyncio.run(run(args.model, args.prompt)))


if __name__ == "__main__":
    main()
