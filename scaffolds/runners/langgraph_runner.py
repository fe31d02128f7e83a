"""Run one task with LangGraph's prebuilt ReAct agent (``create_react_agent``) over ``ChatOpenAI`` and a shell tool.

Launched by Forge's ``langgraph`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from langchain_core.tools import StructuredTool

    return StructuredTool.from_function(mcp.function(tool), name=tool.name, description=tool.description,
                                        args_schema=mcp.arguments(tool))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=50, help="LangGraph's recursion limit")
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()

    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():  # create_react_agent: still LangGraph's prebuilt ReAct loop
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    model = ChatOpenAI(model=args.model, base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                       max_retries=0)
    with agent_tools(args.mcp_config, mcp_tool, [tool(shell)]) as offered:
        agent = create_react_agent(model, offered)
        state = agent.invoke({"messages": [("user", args.prompt)]}, {"recursion_limit": args.max_steps})
        print(state["messages"][-1].content)


if __name__ == "__main__":
    main()
