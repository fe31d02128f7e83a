"""Run one task with an AutoGen ``AssistantAgent`` (autogen-agentchat) and a shell tool, its model
``OpenAIChatCompletionClient`` on the gateway.

Launched by Forge's ``autogen`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. The agent loops over tool calls (up to
``--max-steps``) until it answers without one. Prints the agent's final answer last.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess


def shell(command: str) -> str:
    """Run a shell command in the working folder and return its output."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"


async def run(model: str, prompt: str, max_steps: int) -> str:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    client = OpenAIChatCompletionClient(
        model=model, base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0,
        model_info={"vision": False, "function_calling": True, "json_output": False, "family": "unknown",
                    "structured_output": False})
    agent = AssistantAgent("forge_agent", model_client=client, tools=[shell], max_tool_iterations=max_steps,
                           system_message="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    try:
        result = await agent.run(task=prompt)
    finally:
        await client.close()
    return str(result.messages[-1].content)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=20)
    args = parser.parse_args()
    print(asyncio.run(run(args.model, args.prompt, args.max_steps)))


if __name__ == "__main__":
    main()
