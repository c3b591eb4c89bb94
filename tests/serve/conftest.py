"""`tether serve` as a person and a client meet it: the real command in a child process,
its model a scripted Chat Completions server on loopback (``tests/servers/scripted_chat``),
and, for the page, a real headless Chromium (Debian's ``chromium`` and
``chromium-driver``, which .ci/run installs) driven through selenium. One server and one
browser per module. A browser test that fails leaves a screenshot of the page in
``test-artifacts/serve/``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers.scripted_chat import ScriptedChat

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "serve"
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


class Served:
    """``tether serve --port 0`` in a workspace whose model is ``model`` (``config``: more
    of its tether.toml; ``args``: more flags): ``url`` is the line it printed (the page,
    with its token), ``base`` and ``token`` its parts."""

    def __init__(self, root: Path, model: ScriptedChat, config: str = "",
                 args: tuple[str, ...] = ()) -> None:
        self.root = root
        self.args = args
        self.workspace = root / "ws"
        self.workspace.mkdir()
        (self.workspace / "tether.toml").write_text(textwrap.dedent(f"""\
            default_provider = "m"
            [providers.m]
            kind = "openai-chat"
            base_url = "{model.url}"
            model = "scripted"
            max_retries = 0
            [tools]
            enabled = ["read_file", "write_file", "edit_file", "list_dir"]
            """) + config)
        self.env = {**os.environ, "TETHER_CONFIG": os.devnull,
                    "XDG_DATA_HOME": str(root / "data"), "TETHER_STORE": str(root / "s.db"),
                    "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO),
                                                   os.environ.get("PYTHONPATH", "")])}
        self.env.pop("TETHER_STORE_URL", None)  # this module's own SQLite file
        self.proc: subprocess.Popen[str] | None = None
        self.url = self.base = self.token = ""
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.root / f"serve-{self.starts}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tether.cli", "-w", str(self.workspace), "serve",
             "--port", "0", *self.args],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
            env=self.env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # the URL, once it listens
        if not line:
            self.proc.wait(30)
            raise AssertionError(f"tether serve did not start: {self.log()}")
        self.url = line
        self.base, _, self.token = line.partition("/?token=")

    def log(self) -> str:
        return (self.root / f"serve-{self.starts}.log").read_text()

    def stop(self) -> int:
        """Ctrl-C, as a person stops it; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(60)
        self.proc = None
        return code

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def host(self) -> str:
        return self.base.removeprefix("http://")


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedChat]:
    """The scripted model; a module sets ``model.script`` entries for its prompts."""
    with ScriptedChat({}) as chat:
        yield chat


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, model: ScriptedChat) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("serve"), model)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None:
            server.stop()


def _browser_missing() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev extra brings it)"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists() and shutil.which(path.name) is None:
            return (f"{path} is missing: install Debian's chromium and chromium-driver "
                    f"(.ci/run does)")
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium, driven by chromedriver."""
    missing = _browser_missing()
    if missing:
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM if CHROMIUM.exists() else shutil.which("chromium"))
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                 "--disable-gpu", "--window-size=1280,900", "--no-first-run",
                 "--disable-extensions", "--disable-background-networking"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(
        str(CHROMEDRIVER if CHROMEDRIVER.exists() else shutil.which("chromedriver"))))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed browser test: a screenshot of the page, named for the test."""
    outcome: Any = yield
    report = outcome.get_result()
    driver = getattr(item, "funcargs", {}).get("browser")
    if report.failed and report.when == "call" and driver is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{item.name}.png"
        try:
            driver.save_screenshot(str(path))
        except Exception as e:  # the browser itself may be what failed
            report.sections.append(("screenshot", f"none: {e}"))
        else:
            report.sections.append(("screenshot", str(path)))
