"""Messages are immutable, checked at construction, and say what was wrong."""

from __future__ import annotations

import attrs
import pytest

import agentsessions as agent


def test_named_constructors_build_text_messages() -> None:
    message = agent.Message.user("hello")
    assert message.role is agent.Role.USER
    assert message.content == (agent.Content(agent.ContentType.TEXT, text="hello"),)
    assert message.text == "hello"
    assert agent.Message.assistant("hi").role == "assistant"


def test_messages_are_frozen_and_hashable() -> None:
    message = agent.Message.user("x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.role = agent.Role.ASSISTANT  # type: ignore[misc]
    assert len({message, agent.Message.user("x")}) == 1


def test_roles_and_types_accept_their_values() -> None:
    message = agent.Message("assistant", [agent.Content("tool_use", id="1", name="f", input="{}")])
    assert message.role is agent.Role.ASSISTANT
    assert message.tool_uses[0].type is agent.ContentType.TOOL_USE


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: agent.Message.user(3), "Content.text must be a str, got int"),  # type: ignore[arg-type]
        (lambda: agent.Message("user", "text"), "sequence of Content, got a str"),  # type: ignore[arg-type]
        (lambda: agent.Message("user", [1]), "must hold Content, got int"),  # type: ignore[list-item]
        (lambda: agent.Message("robot", []), "'robot' is not a valid Role"),
        (lambda: agent.Content.tool_use("1", "f", {"a": 1}), "Content.input must be a str, got dict"),  # type: ignore[arg-type]
    ],
)
def test_bad_input_is_named(build: object, complaint: str) -> None:
    with pytest.raises((TypeError, ValueError), match=complaint):
        build()  # type: ignore[operator]


@pytest.mark.parametrize("flag", ["no", "", 1, 0, None])
def test_is_error_must_be_a_bool_not_anything_truthy(flag: object) -> None:
    with pytest.raises(TypeError, match=f"Content.is_error must be a bool, got {type(flag).__name__}"):
        agent.Content(agent.ContentType.TOOL_RESULT, tool_use_id="t", is_error=flag)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"Content\.is_error must be a bool"):
        agent.Content.tool_result("t", "out", is_error=flag)  # type: ignore[arg-type]


def test_is_error_keeps_a_bool() -> None:
    assert agent.Content.tool_result("t", "out", is_error=True).is_error is True
    assert agent.Content.tool_result("t", "out").is_error is False


C = agent.Content
T = agent.ContentType


def test_each_new_block_has_a_named_constructor_that_sets_only_its_fields() -> None:
    assert C.thinking("hm", "sig") == C(T.THINKING, text="hm", signature="sig")
    assert C.redacted_thinking("b3A=") == C(T.REDACTED_THINKING, data="b3A=")
    assert C.image(media_type="image/png", data="AA") == C(T.IMAGE, media_type="image/png", data="AA")
    assert C.image(url="https://x/a.png").url == "https://x/a.png"
    assert C.document(url="https://x/a.pdf", name="a").name == "a"
    raw = C.raw("anthropic", '{"type":"server_tool_use"}', text="")
    assert (raw.type, raw.name, raw.data) == (T.RAW, "anthropic", '{"type":"server_tool_use"}')


@pytest.mark.parametrize(
    ("build", "complaint"),
    [
        (lambda: C(T.TEXT, is_error=True, tool_use_id="t"), "a text block has no tool_use_id"),
        (lambda: C(T.TEXT, "x", is_error=True), "a text block has no is_error"),
        (lambda: C(T.TOOL_USE, "x", "1", "f", "{}"), "a tool_use block has no text"),
        (lambda: C(T.TOOL_RESULT, tool_use_id="t", signature="s"), "a tool_result block has no signature"),
        (lambda: C(T.THINKING, "x", url="u"), "a thinking block has no url"),
        (lambda: C(T.REDACTED_THINKING, "x", data="d"), "a redacted_thinking block has no text"),
        (lambda: C(T.IMAGE, "caption", url="u"), "an image block has no text"),
        (lambda: C.image(), "exactly one; got neither"),
        (lambda: C.image(data="AA", url="u", media_type="image/png"), "exactly one; got both"),
        (lambda: C.document(data="AA"), "needs its media_type"),
        (lambda: C.raw("", "{}"), "names its provider"),
        (lambda: C.raw("anthropic", "not json"), "not JSON"),
        (lambda: C.raw("anthropic", "[1, 2]"), "a JSON object"),
        (lambda: C.thinking("x", 5), "Content.signature must be a str, got int"),  # type: ignore[arg-type]
    ],
)
def test_a_block_refuses_fields_its_type_does_not_use_and_names_the_field(build: object, complaint: str) -> None:
    with pytest.raises((TypeError, ValueError), match=complaint):
        build()  # type: ignore[operator]


def test_text_joins_text_blocks_and_a_raw_blocks_text_never_thinking() -> None:
    message = agent.Message(
        agent.Role.ASSISTANT,
        [C.thinking("secret reasoning", "s"), C.of_text("a "), C.raw("anthropic", '{"type":"text"}', text="b")],
    )
    assert message.text == "a b"


def test_user_takes_text_and_blocks_in_order() -> None:
    image = C.image(url="https://x/cat.png")
    message = agent.Message.user("what is this?", image)
    assert message.content == (C.of_text("what is this?"), image)


def test_a_blocks_repr_shows_only_what_is_set() -> None:
    assert repr(C.tool_result("t", "out")) == "Content(TOOL_RESULT, text='out', tool_use_id='t')"


def test_media_a_tool_returned_is_part_of_its_result() -> None:
    assert C.tool_result("t", "x").part_of_result
    assert C(T.IMAGE, url="u", tool_use_id="t").part_of_result
    assert not C.image(url="u").part_of_result
    assert not C.of_text("x").part_of_result


def test_blocks_evolve_and_pickle_like_any_attrs_class() -> None:
    import pickle

    block = C.thinking("hm", "sig")
    assert attrs.evolve(block, signature="other") == C.thinking("hm", "other")
    assert pickle.loads(pickle.dumps(block)) == block
    with pytest.raises(ValueError, match="has no url"):
        attrs.evolve(block, url="u")
