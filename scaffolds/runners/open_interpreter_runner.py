"""Run one task with Open Interpreter (its Python API: the CLI wants a terminal), its model the gateway's.

Launched by Forge's ``open-interpreter`` scaffold with the agent's own venv python; ``OPENAI_BASE_URL`` and
``OPENAI_API_KEY`` point LiteLLM's OpenAI provider at the Forge gateway. Open Interpreter's one tool is
``execute(language, code)``; it runs what the model asks without confirmation (``auto_run``), offline
(no update check, no telemetry). Prints the agent's final answer last.
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompt", required=True)
    parser.add_argument("--context-window", type=int, default=65536)
    parser.add_argument("--max-tokens", type=int, default=4096)
    args = parser.parse_args()

    from interpreter import interpreter

    interpreter.llm.model = f"openai/{args.model}"
    interpreter.llm.api_base = os.environ["OPENAI_BASE_URL"]
    interpreter.llm.api_key = os.environ["OPENAI_API_KEY"]
    interpreter.llm.supports_functions = True
    interpreter.llm.context_window = args.context_window
    interpreter.llm.max_tokens = args.max_tokens
    interpreter.auto_run = True
    interpreter.offline = True
    interpreter.disable_telemetry = True
    interpreter.loop = False
    messages = interpreter.chat(args.prompt, display=False, stream=False)
    answers = [m.get("content") for m in messages if m.get("role") == "assistant" and m.get("type") == "message"]
    print(answers[-1] if answers else "")


if __name__ == "__main__":
    main()
