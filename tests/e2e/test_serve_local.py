"""`tether serve --local` as a person starts it: the bundled model (built and cached by
`tether local setup`; skipped when it is not) behind the AG-UI endpoint, one prompt that
needs the calculator, the answer streamed back, and Ctrl-C stopping both servers. 7 to 12
seconds; the asserts are on structure (which tool, the tool's value in the answer)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.local import free_port
from tether.local.setup import default_cache_dir, is_set_up

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("real_model")]


def test_serve_local_answers_a_prompt_with_the_bundled_model(tmp_path: Path) -> None:
    from ag_ui.core import Event
    from pydantic import TypeAdapter

    if not is_set_up(default_cache_dir()):
        pytest.skip("the bundled model is not set up (tether local setup)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "tether.toml").write_text(f"[local]\nport = {free_port()}\n")
    env = {**os.environ, "TETHER_CONFIG": os.devnull, "TETHER_STORE": str(tmp_path / "s.db"),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    env.pop("TETHER_STORE_URL", None)
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "-w", str(workspace), "serve", "--local",
             "--port", "0"], stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
            text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url, log.read_text()
        base, _, token = url.partition("/?token=")
        host = base.removeprefix("http://")
        connection = http.client.HTTPConnection(host, timeout=120)
        connection.request("POST", "/agui", body=json.dumps({
            "threadId": "local1", "runId": "r1", "messages": [
                {"id": "m1", "role": "user", "content": "What is 17 * 23? Use the calculator."}]}),
            headers={"Host": host, "Authorization": f"Bearer {token}",
                     "Content-Type": "application/json"})
        response = connection.getresponse()
        body = response.read().decode()
        assert response.status == 200, body
        adapter: TypeAdapter[Any] = TypeAdapter(Event)
        parsed = [adapter.validate_json(f.removeprefix("data: "))
                  for f in body.split("\n\n") if f.strip()]
        kinds = [e.type.value for e in parsed]
        assert kinds[0] == "RUN_STARTED" and kinds[-1] == "RUN_FINISHED", kinds
        assert [e.tool_call_name for e in parsed if e.type.value == "TOOL_CALL_START"] == \
            ["calculator"]
        assert [e.content for e in parsed if e.type.value == "TOOL_CALL_RESULT"] == ["391"]
        answer = "".join(e.delta for e in parsed if e.type.value == "TEXT_MESSAGE_CONTENT")
        assert "391" in answer and parsed[-1].outcome.type == "success"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    assert code == 0, log.read_text()
    assert "llama-server ready" in log.read_text()
