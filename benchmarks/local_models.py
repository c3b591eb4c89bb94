"""Local models, measured with the real model on this machine (docs/local.md).

1. Many models on one server: ``tether local serve --models-dir DIR`` (llama-server's
   router) over a folder holding the bundled Qwen2.5-Coder-0.5B and SmolLM2-135M. For each
   model, the time to the first streamed token of its first request (the router loads it
   then) and of the next two (loaded: its cache), and the router's own ``/models`` states.

2. The window reaches the model: a conversation of about 9,000 tokens through tether's
   Ollama wire (``Ollama(num_ctx=2048)``), to a loopback server speaking Ollama's
   ``/api/chat`` that hands each request to a llama-server started with ``-c 2048`` (no
   Ollama on this machine: the server translates, nothing more, and records what it got).
   Printed: the ``num_ctx`` each request carried, the prompt tokens the model read, and
   whether the conversation's last messages were in it.

    python benchmarks/local_models.py MODELS_DIR

MODELS_DIR holds the GGUF files (``qwen...gguf``, ``smollm2-135m.gguf``); the second part
uses the cached default model (``tether local setup``).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tether import Agent
from tether.conversation import Conversation
from tether.local.server import LocalServer, router_models
from tether.messages import Message, Text
from tether.providers import OpenAIChat, RetryPolicy
from tether.providers.ollama import Ollama


async def first_token(client: httpx.AsyncClient, base: str, model: str) -> float:
    started = time.perf_counter()
    body = {"model": model, "stream": True, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Say hello."}]}
    async with client.stream("POST", f"{base}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data: ") and '"content"' in line:
                return time.perf_counter() - started
    raise RuntimeError("no token came")


async def router(folder: Path) -> None:
    names = router_models(folder)
    server = LocalServer(models_dir=folder, port=0, context=2048)
    async with server, httpx.AsyncClient(timeout=300) as client:
        print(f"router ready in {server.ready_seconds:.2f} s over {names}")
        for name in names:
            times = [await first_token(client, server.base_url, name) for _ in range(3)]
            print(f"  {name}: first token {times[0]:.2f} s (load), then "
                  f"{times[1]:.2f} s and {times[2]:.2f} s")
        listing = (await client.get(f"http://127.0.0.1:{server.port}/models")).json()
        print("  /models:", {m["id"]: m.get("status", {}).get("value") for m in listing["data"]})
        # The first model again, after the second: still loaded (--models-max 2).
        again = await first_token(client, server.base_url, names[0])
        print(f"  {names[0]} again: first token {again:.2f} s")


class OllamaOnLlamaServer(BaseHTTPRequestHandler):
    """``/api/chat`` (not streamed) answered by a llama-server's Chat Completions."""

    upstream = ""
    seen: list[dict[str, Any]] = []  # noqa: RUF012 (one server per run)

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        options = body.get("options") or {}
        chat = {"model": body["model"], "messages": body["messages"], "temperature": 0,
                "max_tokens": options.get("num_predict", 32)}
        answer = httpx.post(f"{self.upstream}/chat/completions", json=chat, timeout=300)
        usage = answer.json().get("usage", {}) if answer.status_code == 200 else {}
        self.seen.append({"num_ctx": options.get("num_ctx"), "messages": body["messages"],
                          "status": answer.status_code, "prompt": usage.get("prompt_tokens")})
        if answer.status_code != 200:
            out = json.dumps({"error": answer.text}).encode()
            self.send_response(500)
        else:
            text = answer.json()["choices"][0]["message"]["content"] or ""
            out = json.dumps({"model": body["model"], "done": True, "done_reason": "stop",
                              "message": {"role": "assistant", "content": text},
                              "prompt_eval_count": usage.get("prompt_tokens"),
                              "eval_count": usage.get("completion_tokens")}).encode()
            self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def long_conversation() -> Conversation:
    messages: list[Message] = []
    for i in range(80):
        messages += [Message.user(f"Note {i}: the parcel for room {100 + i} is "
                                  + "in the blue cabinet behind the desk " * 6),
                     Message("assistant", (Text(f"Noted: room {100 + i}."),))]
    return Conversation(messages)


async def window() -> None:
    async with LocalServer(port=0, context=2048) as llama:
        OllamaOnLlamaServer.upstream = llama.base_url
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), OllamaOnLlamaServer)
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        try:
            conversation = long_conversation()
            chars = sum(len(m.text) for m in conversation.messages)
            model = Ollama(f"http://127.0.0.1:{httpd.server_address[1]}", "qwen",
                           num_ctx=2048, retry=RetryPolicy(max_retries=0))
            result = await Agent(model, max_output_tokens=32).run(
                "Which room's parcel did I note last? Answer with the room number.",
                conversation=conversation)
            [seen] = OllamaOnLlamaServer.seen
            sent = json.dumps(seen["messages"])
            print(f"conversation: {len(conversation.messages)} messages, {chars} characters "
                  f"(about {chars // 4} tokens)")
            print(f"  Ollama wire: num_ctx {seen['num_ctx']}, {len(seen['messages'])} messages "
                  f"sent, the model read {seen['prompt']} prompt tokens (status "
                  f"{seen['status']}); the last note in it: {'Note 79:' in sent}; answer "
                  f"{result.text.strip()!r}")
            # The same conversation, unfitted, to the same server: what a client that does
            # not fit (or a server that ignores the window) faces.
            plain = OpenAIChat(llama.base_url, "qwen", profile="llama-server")
            unfitted = Agent(plain, context="off", max_output_tokens=32)
            outcome = [e async for e in unfitted.stream("Which room?",
                                                        conversation=long_conversation())][-1]
            print(f"  unfitted, same server: {outcome.result.stop_cause}: "  # type: ignore[attr-defined]
                  f"{str(outcome.result.error)[:120]}")  # type: ignore[attr-defined]
            await plain.aclose()
            await model.aclose()
        finally:
            httpd.shutdown()


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    if folder is not None:
        asyncio.run(router(folder))
    asyncio.run(window())


if __name__ == "__main__":
    main()
