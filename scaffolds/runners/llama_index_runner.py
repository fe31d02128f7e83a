"""Run one task with a LlamaIndex ``FunctionAgent`` and a shell tool, its LLM ``OpenAILike`` on the gateway.

Launched by Forge's ``llama-index`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
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


async def run(model: str, prompt: str) -> str:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model=model, api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                     is_chat_model=True, is_function_calling_model=True, context_window=65536, max_retries=0)
    agent = FunctionAgent(tools=[shell], llm=llm,
                          system_prompt="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    return str(await agent.run(user_msg=prompt))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    args = parser.parse_args()
    print(asyncio.run(run(args.model, args.prompt)))


if __name__ == "__main__":
    main()
