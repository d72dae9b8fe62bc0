"""wfrun inside an openai-agents loop, through `runner.AgentSession`.

One `Runner.run_streamed` is one turn. The `workflow` tool is served from the
session (its schema is wfrun's, as is); whatever wfrun asks the model to see
next (a launch failure, an agent step) is the next run's input. One event loop
serves every turn.

    pip install 'wfrun[agents]'
    OPENAI_BASE_URL=... OPENAI_API_KEY=... \
        python docs/examples/openai_agents_session.py PROJECT "please start the review"
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

try:  # the framework is the `agents` extra: say so in one line, not a traceback
    from agents import (
        Agent,
        FunctionTool,
        OpenAIChatCompletionsModel,
        RunContextWrapper,
        Runner,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI
except ImportError as exc:
    sys.exit(f"this example needs {exc.name}: pip install 'wfrun[agents]'")

from runner import AgentSession

INSTRUCTIONS = ("You drive wfrun workflows with the `workflow` tool. A started workflow "
                "runs after your turn ends; follow each step contract you are sent.")


def workflow_tool(session: AgentSession) -> FunctionTool:
    async def invoke(_ctx: RunContextWrapper[Any], arguments: str) -> str:
        # Parallel calls of one message are serialized inside the session.
        return (await session.acall_tool(arguments)).content

    return FunctionTool(name=session.tool["name"], description=session.tool["description"],
                        params_json_schema=session.tool["parameters"], on_invoke_tool=invoke,
                        strict_json_schema=False)


async def drive(session: AgentSession, client: AsyncOpenAI, model: str,
                prompt: str) -> list[str]:
    agent = Agent(name="wfrun-assistant", instructions=INSTRUCTIONS,
                  model=OpenAIChatCompletionsModel(model=model, openai_client=client),
                  tools=[workflow_tool(session)])
    history: list[Any] = []

    async def one_turn(text: str) -> str:
        nonlocal history
        result = Runner.run_streamed(agent, [*history, {"role": "user", "content": text}])
        async for _event in result.stream_events():
            pass  # a UI would render the stream here
        history = result.to_input_list()
        return str(result.final_output)

    try:
        return await session.arun(one_turn, prompt)
    finally:
        await client.close()


def main(project: str, prompt: str, *, base_url: str | None = None,
         api_key: str | None = None, model: str = "gpt-4o-mini",
         session_id: str = "openai-agents") -> list[str]:
    """Run `prompt` and every follow-up turn wfrun asks for; each turn's final text."""
    set_tracing_disabled(True)  # the SDK would otherwise upload traces
    client = AsyncOpenAI(base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
                         api_key=api_key or os.environ.get("OPENAI_API_KEY", "unused"))
    with AgentSession.open(project, session_id=session_id) as session:
        return asyncio.run(drive(session, client, model, prompt))


if __name__ == "__main__":
    for reply in main(sys.argv[1], sys.argv[2]):
        print(reply)
