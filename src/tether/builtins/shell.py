"""``shell``: run a command with ``/bin/sh`` in the workspace, inside a sandbox. Off unless
``[tools] enabled`` names it.

Every command runs confined (``tether.sandbox``): it writes the workspace (and what the
``Sandbox`` adds) only, cannot read the user's secrets or tether's own files, gets an
environment from an allowlist, and has no network unless the sandbox allows it. When no
mechanism works here, the call fails with ``SandboxUnavailable`` (never a silent run
without one); ``Sandbox(mode="none")`` runs it with all of the user's rights, as asked.

It can still read the rest of the machine and change the workspace, so it declares
private + destructive; with the network on (or no sandbox), external_send too: every call
passes the approval gate, and the trifecta interlock treats a networked shell as a way
out. A sandboxed shell without network cannot send, so it is not external_send. Approval
is per call ("allow for this session" is not offered: one approved command says nothing
about the next), except for a read-only command line run confined (``shell_policy``:
``ls``, ``cat``, ``grep``, ``git status``... alone or piped, nothing that writes or runs
more), which runs without a prompt once every other check has let it.

The command runs in its own process group (session); when it exceeds its time, or the call
is cancelled, the whole group is killed, so nothing it started keeps running. Output
(stdout and stderr together) is capped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from typing import Any

from tether.builtins.shell_policy import read_only_command
from tether.sandbox import Sandbox, confine, run_confined
from tether.tools.function import tool
from tether.tools.tool import Tool, ToolContext, ToolOutput
from tether.trust import Capabilities

# What an unconfined (or networked) shell declares.
SHELL_CAPABILITIES = Capabilities(private_data=True, destructive=True, external_send=True)
# A sandboxed shell without network: it reads and changes, it cannot send.
OFFLINE_SHELL_CAPABILITIES = Capabilities(private_data=True, destructive=True)


def shell_capabilities(sandbox: Sandbox) -> Capabilities:
    """What a shell confined by ``sandbox`` can do: no external_send when the kernel keeps
    it off the network."""
    if sandbox.mode != "none" and not sandbox.network:
        return OFFLINE_SHELL_CAPABILITIES
    return SHELL_CAPABILITIES


def make_shell(*, timeout_secs: float = 120.0, max_output_bytes: int = 30_000,
               sandbox: Sandbox | None = None, allow: Iterable[str] = ()) -> Tool:
    """A ``shell`` tool with its own time bound, output cap and sandbox (default:
    ``Sandbox()``: the first mechanism that works here, no network). Confined, a read-only
    command line runs without a prompt (``shell_policy.read_only_command``; ``allow`` adds
    command names to its list); everything else asks."""
    confinement = Sandbox() if sandbox is None else sandbox
    listed = tuple(allow)

    def unasked(arguments: Mapping[str, Any]) -> str | None:
        command = arguments.get("command")
        if confinement.mode == "none" or not isinstance(command, str):
            return None  # unconfined, nothing is spared a prompt
        if not read_only_command(command, listed):
            return None
        return "a read-only command line, run in the sandbox"

    async def shell(ctx: ToolContext, command: str) -> ToolOutput:
        """Run a shell command (/bin/sh -c) in the workspace folder and return its output
        (stdout and stderr together) and exit code. Long-running commands are stopped.

        Args:
            command: the command line, e.g. "ls -la" or "python -m pytest -q".
        """
        if os.name != "posix":
            return ToolOutput("Error: the shell tool runs on POSIX systems only.",
                              is_error=True, from_outside=False)
        if not command.strip():
            return ToolOutput("Error: the command is empty.", is_error=True)
        return await _run(command, ctx, confinement, timeout_secs, max_output_bytes)

    made = tool(name="shell", capabilities=shell_capabilities(confinement),
                cache_approval=False)(shell)
    return dataclasses.replace(made, unasked=unasked)


async def _run(command: str, ctx: ToolContext, sandbox: Sandbox, timeout: float,
               cap: int) -> ToolOutput:
    # SandboxUnavailable propagates: the call fails saying how to install or opt out.
    confined = confine(sandbox, ["/bin/sh", "-c", command], cwd=ctx.workspace,
                       writable=[ctx.workspace], protected=ctx.security.protected_paths)
    done = await run_confined(confined, cwd=ctx.workspace, timeout=timeout,
                              max_output_bytes=cap)
    text = done.output.decode("utf-8", errors="replace")
    if done.dropped:
        text += f"\n[... output cut: {done.dropped} more bytes not shown]"
    for path in done.removed:
        text += f"\n[tether removed {path}: a confined command may not make tether's own files]"
    if done.timed_out:
        return ToolOutput(f"Error: the command did not finish within {timeout:g}s; it and "
                          f"every process it started were killed. Output so far:\n{text}",
                          is_error=True)
    code = done.returncode
    return ToolOutput(f"{text}\n[exit code {code}]" if text else f"[exit code {code}]",
                      is_error=code != 0)


shell: Tool = make_shell()
