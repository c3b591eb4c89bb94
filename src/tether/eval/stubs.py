"""A case's tools: stubs made from their declarations (canned results, declared
capabilities and parameter roles: the gate judges their calls as it judges a real tool's),
and the tools of a tools file. Each run gets its own stubs, so ``results`` count one run's
calls.
"""

from __future__ import annotations

import json
from typing import Any

from tether.config.tool_files import load_tools
from tether.errors import TetherError
from tether.eval.cases import Case, EvalError, StubTool
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.tools.toolsets import Toolset
from tether.trust import Capabilities

INJECTION_MARK = "{injection}"
UNTRUSTED_SERVER_TOOL = Capabilities(private_data=True, untrusted_input=True,
                                     external_send=True, destructive=True)


def stub_tool(stub: StubTool) -> Tool:
    """A ``Tool`` answering ``stub``'s canned results in turn (the last repeats)."""
    texts = [_as_text(r) for r in (stub.results if stub.results is not None else [stub.result])]
    if stub.injection is not None:
        texts = [_injected(t, stub.injection) for t in texts]
    calls = 0

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        nonlocal calls
        text = texts[min(calls, len(texts) - 1)]
        calls += 1
        return ToolOutput(text, is_error=stub.error)

    caps = Capabilities(**{name: True for name in stub.capabilities})
    outside = stub.untrusted_server is not None
    if outside:
        # As an untrusted server's tool is made (tether.mcp.mapping): its hints are not
        # believed, so it reads, brings outside text, sends and changes things.
        caps = caps | UNTRUSTED_SERVER_TOOL
    return Tool.from_schema(stub.name, stub.description or f"The {stub.name} tool.",
                            dict(stub.parameters), handler,
                            needs_approval=stub.needs_approval or outside,
                            capabilities=caps, origin="python",
                            content_params=stub.content_params,
                            destination_params=stub.destination_params,
                            server=stub.untrusted_server, spec_from_outside=outside)


def case_tools(case: Case) -> list[Tool | Toolset]:
    """Fresh tools for one run of ``case``: its stubs, then its tools files' tools."""
    tools: list[Tool | Toolset] = [stub_tool(s) for s in case.tools]
    for reference in case.tools_file:
        try:
            tools.extend(load_tools(reference))
        except TetherError as e:
            raise EvalError(f"case {case.id!r}: tools_file {reference}: {e}") from None
    return tools


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _injected(text: str, injection: str) -> str:
    if INJECTION_MARK in text:
        return text.replace(INJECTION_MARK, injection)
    return f"{text}\n{injection}" if text else injection


__all__ = ["INJECTION_MARK", "case_tools", "stub_tool"]
