"""Run one task with DSPy's ``ReAct`` module and a shell tool, its LM the gateway's (Chat Completions).

Launched by Forge's ``dspy`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point LiteLLM's OpenAI provider at the Forge gateway. DSPy sends no tools: its
ChatAdapter asks for fields in a text protocol (``[[ ## next_tool_name ## ]]``, …) and runs the tool
the model names. Prints the agent's final answer last.
"""

from __future__ import annotations

import argparse
import os
import subprocess


def shell(command: str) -> str:
    """Run a shell command in the working folder and return its output."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-8000:] + f"\n[exit code {done.returncode}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--max-steps", type=int, default=10)
    args = parser.parse_args()

    import dspy

    lm = dspy.LM(f"openai/{args.model}", api_base=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"],
                 cache=False, num_retries=0)
    dspy.configure(lm=lm)
    agent = dspy.ReAct("task -> result", tools=[shell], max_iters=args.max_steps)
    print(agent(task=args.prompt).result)


if __name__ == "__main__":
    main()
