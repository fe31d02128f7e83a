"""Run one task with DSPy's ``ReAct`` module and a shell tool, its LM the gateway's (Chat Completions).

Launched by Forge's ``dspy`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point LiteLLM's OpenAI provider at the Forge gateway. DSPy sends no tools: its
ChatAdapter asks for fields in a text protocol (``[[ ## next_tool_name ## ]]``, …) and runs the tool
the model names. Prints the agent's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    import dspy

    properties = tool.schema.get("properties") or {}
    return dspy.Tool(mcp.function(tool), name=tool.name, desc=tool.description, args=properties)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()

    import dspy

    lm = dspy.LM(f"openai/{args.model}", api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                 cache=False, num_retries=0)
    dspy.configure(lm=lm)
    with agent_tools(args.mcp_config, mcp_tool, [shell]) as offered:
        agent = dspy.ReAct("task -> result", tools=offered, max_iters=args.max_steps)
        print(agent(task=args.prompt).result)


if __name__ == "__main__":
    main()
