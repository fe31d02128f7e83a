"""Run one task with a LlamaIndex ``FunctionAgent`` and a shell tool, its LLM ``OpenAILike`` on the gateway.

Launched by Forge's ``llama-index`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from llama_index.core.tools import FunctionTool

    call = mcp.function(tool)

    async def run_async(**arguments: Any) -> str:  # off the agent's event loop
        return await asyncio.to_thread(call, **arguments)

    return FunctionTool.from_defaults(fn=call, async_fn=run_async, name=tool.name, description=tool.description,
                                      fn_schema=mcp.arguments(tool))


async def run(model: str, prompt: str, tools: list[Any]) -> str:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(model=model, api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                     is_chat_model=True, is_function_calling_model=True, context_window=65536, max_retries=0)
    agent = FunctionAgent(tools=tools, llm=llm,
                          system_prompt="You are a coding agent working in the current folder. Use the shell tool to do the task.")
    return str(await agent.run(user_msg=prompt))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        print(asyncio.run(run(args.model, args.prompt, offered)))


if __name__ == "__main__":
    main()
