"""Images a tool result carries (an MCP tool's image content), as each wire sends them to
the model: beside the result where the wire allows it, in a user message after the tool
messages for Chat Completions, labelled with their call and their trust; to a server that
takes no images, a note instead. And what they cost in the context window."""

from __future__ import annotations

from typing import Any

from tether.messages import Image, Message, ToolCall, ToolResult
from tether.providers import anthropic, gemini, openai_chat, openai_responses
from tether.providers.base import ModelRequest
from tether.providers.profiles import PROFILES
from tether.run.context.plan import IMAGE_TOKENS, Estimate

PIXEL = Image("image/png", b"\x89PNG\r\n\x1a\nfake")


def conversation(trust: str = "untrusted") -> list[Message]:
    return [
        Message.user("draw"),
        Message("assistant", (ToolCall("c1", "f__picture", "{}"), ToolCall("c2", "echo", "{}"))),
        Message("tool", (ToolResult("c1", "f__picture", "a red pixel: [image 1: image/png]",
                                    trust=trust, images=(PIXEL,)),  # type: ignore[arg-type]
                         ToolResult("c2", "echo", "hi"))),
    ]


def test_chat_completions_sends_the_images_after_every_tool_message_of_the_turn() -> None:
    body = openai_chat.request_body(ModelRequest(conversation()), "m", PROFILES["openai"])
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "user"]
    label, image = body["messages"][-1]["content"]
    assert "c1 (f__picture)" in label["text"] and "not instructions" in label["text"]
    assert image["image_url"]["url"] == f"data:image/png;base64,{PIXEL.base64()}"


def test_a_server_that_takes_no_images_is_told_they_were_left_out() -> None:
    body = openai_chat.request_body(ModelRequest(conversation()), "m", PROFILES["generic"])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "tool"]
    assert body["messages"][2]["content"].endswith(
        "[the tool returned an image, left out: this model server does not accept images]")
    assert "image_url" not in str(body)


def test_a_trusted_results_images_are_labelled_without_the_warning() -> None:
    body = openai_chat.request_body(ModelRequest(conversation("trusted")), "m",
                                    PROFILES["openai"])
    label = body["messages"][-1]["content"][0]["text"]
    assert label == "[the image returned by the tool call c1 (f__picture)]"


def test_anthropic_puts_the_images_in_the_tool_result_block() -> None:
    body = anthropic.request_body(ModelRequest(conversation()), "m", 1024)
    result = body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "c1"
    kinds = [block["type"] for block in result["content"]]
    assert kinds == ["text", "text", "image"]
    assert result["content"][2]["source"] == {"type": "base64", "media_type": "image/png",
                                              "data": PIXEL.base64()}


def test_responses_sends_the_images_as_items_of_the_call_output() -> None:
    items = openai_responses.input_items(conversation())
    output: Any = next(i for i in items if i.get("call_id") == "c1" and "output" in i)["output"]
    assert [o["type"] for o in output] == ["input_text", "input_text", "input_image"]


def test_gemini_sends_the_images_as_inline_data_after_the_function_responses() -> None:
    body = gemini.request_body(ModelRequest(conversation()))
    parts = body["contents"][-1]["parts"]
    assert [next(iter(p)) for p in parts] == ["functionResponse", "functionResponse", "text",
                                              "inlineData"]


def test_a_results_images_count_against_the_window() -> None:
    (_, _, with_images) = conversation()
    without = Message("tool", tuple(ToolResult(p.call_id, p.name, p.content)  # type: ignore
                                    for p in with_images.parts))
    assert Estimate().message(with_images) - Estimate().message(without) >= IMAGE_TOKENS
