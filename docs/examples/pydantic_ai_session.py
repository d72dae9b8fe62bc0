"""wfrun inside a pydantic-ai loop, through `runner.AgentSession`.

One `Agent.run` is one turn; the message history carries the conversation
from turn to turn, and whatever wfrun asks the model to see next (a launch
failure, an agent step) is the next run's prompt.

    pip install 'wfrun[agents]'
    OPENAI_BASE_URL=... OPENAI_API_KEY=... \
        python docs/examples/pydantic_ai_session.py PROJECT "please start the review"
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

try:  # the framework is the `agents` extra: say so in one line, not a traceback
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelMessage
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
except ImportError as exc:
    sys.exit(f"this example needs {exc.name}: pip install 'wfrun[agents]'")

from runner import AgentSession

INSTRUCTIONS = ("You drive wfrun workflows with the `workflow` tool. A started workflow "
                "runs after your turn ends; follow each step contract you are sent.")


def workflow_tool(session: AgentSession) -> Tool[Any]:
    def workflow(**arguments: Any) -> str:
        # pydantic-ai runs one message's calls concurrently; the session serializes them.
        return session.call_tool(arguments).content

    return Tool.from_schema(workflow, name=session.tool["name"],
                            description=session.tool["description"],
                            json_schema=session.tool["parameters"])


def main(project: str, prompt: str, *, base_url: str | None = None,
         api_key: str | None = None, model: str = "gpt-4o-mini",
         session_id: str = "pydantic-ai") -> list[str]:
    """Run `prompt` and every follow-up turn wfrun asks for; each turn's output."""
    provider = OpenAIProvider(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                              api_key=api_key or os.environ.get("OPENAI_API_KEY", "unused"))
    with AgentSession.open(project, session_id=session_id) as session:
        agent = Agent(OpenAIChatModel(model, provider=provider), instructions=INSTRUCTIONS,
                      tools=[workflow_tool(session)])
        history: list[ModelMessage] = []

        async def one_turn(text: str) -> str:
            nonlocal history
            result = await agent.run(text, message_history=history)
            history = result.all_messages()
            return str(result.output)

        # One event loop for every turn, closed at the end (`run_sync` would leave the
        # thread's implicit loop open behind it).
        return asyncio.run(session.arun(one_turn, prompt))


if __name__ == "__main__":
    for reply in main(sys.argv[1], sys.argv[2]):
        print(reply)
