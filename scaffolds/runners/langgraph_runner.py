"""Run one task with LangGraph's prebuilt ReAct agent (``create_react_agent``) over ``ChatOpenAI`` and a shell tool.

Launched by Forge's ``langgraph`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point the model at the Forge gateway. Prints the agent's final answer last.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import warnings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=50, help="LangGraph's recursion limit")
    args = parser.parse_args()

    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():  # create_react_agent: still LangGraph's prebuilt ReAct loop
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    @tool
    def shell(command: str) -> str:
        """Run a shell command in the working folder and return its output.

        Args:
            command: the command line to run with /bin/sh.
        """
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"

    model = ChatOpenAI(model=args.model, base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                       max_retries=0)
    agent = create_react_agent(model, [shell])
    state = agent.invoke({"messages": [("user", args.prompt)]}, {"recursion_limit": args.max_steps})
    print(state["messages"][-1].content)


if __name__ == "__main__":
    main()
