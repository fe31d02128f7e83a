"""Run one task with a CrewAI crew of one ``Agent`` with a shell tool, its LLM the gateway's (Chat Completions).

Launched by Forge's ``crewai`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point CrewAI's LLM (LiteLLM's OpenAI provider) at the Forge gateway. Telemetry is off
(``CREWAI_DISABLE_TELEMETRY``, ``OTEL_SDK_DISABLED``). Prints the crew's final answer last.
``--mcp-config FILE`` (the scaffold's ``mcp`` option): the tools of those MCP servers instead of the shell
(``forge_runner``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from forge_runner import agent_tools, shell


def mcp_tool(mcp: Any, tool: Any) -> Any:
    from crewai.tools import BaseTool

    call = mcp.function(tool)

    class McpTool(BaseTool):
        name: str = tool.name
        description: str = tool.description
        args_schema: Any = mcp.arguments(tool)

        def _run(self, **arguments: Any) -> str:
            return call(**arguments)

    return McpTool()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=10)
    parser.add_argument("--mcp-config", default="", help="an mcpServers JSON file: its servers' tools instead of the shell")
    args = parser.parse_args()

    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    llm = LLM(model=f"openai/{args.model}", base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
    with agent_tools(args.mcp_config, mcp_tool, [tool("shell")(shell)]) as offered:
        agent = Agent(role="coding agent", goal="Do the task in the current folder with the shell tool.",
                      backstory="You work in a terminal.", tools=offered, llm=llm, allow_delegation=False,
                      max_iter=args.max_steps, verbose=False)
        task = Task(description=args.prompt, expected_output="What you did.", agent=agent)
        print(Crew(agents=[agent], tasks=[task], verbose=False).kickoff())


if __name__ == "__main__":
    main()
