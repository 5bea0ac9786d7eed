"""The codec's fast decoders (msgspec, when installed) read exactly what the stdlib reads, surrogates included."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentsessions as agent
from agentsessions import codec, messages

# Any code point, surrogates included, so lone and adjacent pairs of them come up.
texts = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40)
needs_fast = pytest.mark.skipif(codec._fast_decode is None, reason="msgspec is not installed: the stdlib decodes alone")


@needs_fast
@given(texts, st.booleans())
def test_a_json_string_decodes_as_the_stdlib_decodes_it(text: str, ascii_only: bool) -> None:
    written = json.dumps({"v": 1, "text": text}, ensure_ascii=ascii_only)
    assert codec._decode(written) == json.loads(written)
    if not ascii_only and text == text.encode("utf-8", "surrogatepass").decode("utf-8", "replace"):
        assert codec._decode(written.encode()) == json.loads(written)


@needs_fast
@pytest.mark.parametrize(
    "escaped",
    ['"\\ud800"', '"\\udc00\\ud800"', '"\\ud83d\\ude00"', '"x\\ud83dy"', '"\\u0000\\uffff\\ufffe"', '"\\udfff\\udbff"'],
)
def test_surrogate_escapes_decode_as_the_stdlib_decodes_them(escaped: str) -> None:
    assert codec._decode(escaped) == json.loads(escaped)


@given(texts, texts)
def test_a_message_comes_back_verbatim(text: str, name: str) -> None:
    message = agent.Message(
        agent.Role.ASSISTANT, [agent.Content.of_text(text), agent.Content.tool_use(name or "x", "add", text)]
    )
    assert codec.load_message(codec.dump_message(message)) == message
    assert codec.load_message(codec.dump_message(message).encode("utf-8")) == message


def test_a_version_1_row_with_a_lone_surrogate_escape_reads_with_json_meaning() -> None:
    row = '{"v":1,"role":"user","content":[{"type":"text","text":"a\\ud800b\\ud83d\\ude00"}]}'
    assert codec.load_message(row) == agent.Message.user("a\ud800b\U0001f600")


def test_foreign_text_the_fast_decoder_refuses_is_still_a_format_error() -> None:
    with pytest.raises(agent.FormatError):
        codec.load_message('{"v": NaN}')
    with pytest.raises(agent.FormatError):
        codec.load_message(b"\xff")


@needs_fast
@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40), st.booleans())
def test_a_row_of_this_version_is_read_straight_into_the_same_message(text: str, is_error: bool) -> None:
    message = agent.Message(
        agent.Role.USER,
        [agent.Content.of_text(text), agent.Content.tool_result(text or "t", text, is_error=is_error)],
    )
    row = codec.dump_message(message)
    assert codec._decode_message is not None
    fast = codec._decode_message(row)
    assert fast == message and hash(fast) == hash(message)
    assert type(fast.content) is tuple and all(type(block) is agent.Content for block in fast.content)
    assert fast.role is agent.Role.USER and fast.content[0].type is agent.ContentType.TEXT


@needs_fast
def test_the_new_blocks_are_read_straight_and_checked_as_the_constructor_checks_them() -> None:
    C = agent.Content
    message = agent.Message(
        agent.Role.ASSISTANT,
        [
            C.thinking("hm", "c2ln"),
            C.redacted_thinking("b3BhcXVl"),
            C.raw("anthropic", '{"type":"server_tool_use","id":"s1"}'),
            C.image(media_type="image/png", data="iVBORw0KGgo="),
            C.document(url="https://example.com/a.pdf", name="a"),
            C.compaction("the story so far", covers=7),
        ],
    )
    row = codec.dump_message(message)
    assert codec._decode_message is not None
    assert codec._decode_message(row) == message


@needs_fast
@pytest.mark.parametrize(
    ("row", "error"),
    [
        ('{"v":4,"role":"user","content":[{"type":"tool_result","is_error":1}]}', "is_error must be a bool"),
        ('{"v":4,"role":"user","content":[{"type":"text","text":"a","is_error":true}]}', "has no is_error"),
        ('{"v":4,"role":"user","content":[{"type":"image","data":"AA"}]}', "needs its media_type"),
        ('{"v":4,"role":"user","content":[{"type":"raw","name":"x","data":"1"}]}', "JSON object"),
        ('{"v":4,"role":"user","content":[{"type":"compaction","text":"s","covers":0}]}', "covers at least one"),
        ('{"v":4,"role":"user","content":[{"type":"compaction","text":"s","covers":true}]}', "covers must be an int"),
        ('{"v":2,"role":"user","content":[{"type":"image"}]}', "malformed message"),
        ('{"v":2,"role":"system","content":[]}', "malformed message"),
        ('{"v":2,"role":"user"}', "malformed message"),
        ('{"v":2,"role":"user","content":[]} trailing', "not JSON"),
        ('{"v":5,"role":"user","content":[]}', "newer than this agentsessions reads"),
    ],
)
def test_a_row_the_fast_path_refuses_gets_the_careful_paths_error(row: str, error: str) -> None:
    with pytest.raises(agent.FormatError, match=error):
        codec.load_message(row)
    with pytest.raises(agent.FormatError, match=error):
        codec.load_message(row.encode())


# Each block type with every field it leaves at its default: a minimal valid block, then one
# more field set. The fast decoder's own check (Content.__attrs_post_init__) must refuse each.
_MINIMAL: dict[str, dict[str, object]] = {
    "text": {"text": "a"},
    "tool_use": {"id": "c", "name": "add", "input": "{}"},
    "tool_result": {"tool_use_id": "c", "text": "2"},
    "thinking": {"text": "hm"},
    "redacted_thinking": {"data": "b3Bh"},
    "image": {"media_type": "image/png", "data": "AA"},
    "document": {"url": "https://example.com/a.pdf"},
    "raw": {"name": "anthropic", "data": "{}"},
    "compaction": {"text": "summary", "covers": 2},
}
_STRAY = [
    (kind, name)
    for kind in _MINIMAL
    for name in messages.VALUE_FIELDS
    if name not in messages.FIELDS[agent.ContentType(kind)]
]


@needs_fast
@pytest.mark.parametrize(("kind", "name"), _STRAY)
def test_a_stored_block_with_a_field_its_type_does_not_use_is_refused_on_the_fast_path(kind: str, name: str) -> None:
    block: dict[str, object] = {"type": kind, **_MINIMAL[kind]}
    assert codec._decode_message is not None
    # The minimal block reads: what follows is refused for the one field added.
    codec._decode_message(json.dumps({"v": codec.FORMAT_VERSION, "role": "user", "content": [block]}))
    block[name] = {"is_error": True, "covers": 1}.get(name, "x")
    row = json.dumps({"v": codec.FORMAT_VERSION, "role": "user", "content": [block]})
    with pytest.raises(ValueError, match=f"has no {name}"):
        codec._decode_message(row)
    with pytest.raises(agent.FormatError, match=f"has no {name}"):
        codec.load_message(row)


# --- A whole transcript's rows at once (load_messages, what every store's read uses) ---------------

_ROWS_OF_EVERY_KIND = [
    '{"v":1,"role":"user","content":[{"type":"text","text":"a\\ud800b"}]}',  # a lone surrogate escape
    '{"v":2,"role":"user","content":[{"type":"text","text":["x",55357,"y"]}]}',  # a field spelled as pieces
    '{"v":2,"role":"assistant","content":[{"type":"text","text":"t","name":"stray"}]}',  # an unused field, then
    '{"v":3,"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"c2ln"}]}',
    '{"v": 4, "role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "text": "2"}]}',
]


@given(st.lists(st.sampled_from(["text", "tool_use", "tool_result", "compaction"]), max_size=6), texts)
def test_a_transcripts_rows_read_at_once_as_each_reads_alone(kinds: list[str], text: str) -> None:
    C = agent.Content
    made = {
        "text": lambda: agent.Message.user(text),
        "tool_use": lambda: agent.Message(agent.Role.ASSISTANT, [C.tool_use("c", "add", text)]),
        "tool_result": lambda: agent.Message(agent.Role.USER, [C.tool_result("c", text, is_error=True)]),
        "compaction": lambda: agent.Message(agent.Role.USER, [C.compaction(text, covers=3)]),
    }
    transcript = [made[kind]() for kind in kinds]
    for rows in ([codec.dump_message(m) for m in transcript], [codec.dump_message(m).encode() for m in transcript]):
        read = codec.load_messages(rows)
        assert read == transcript == [codec.load_message(row) for row in rows]
        assert all(type(block) is agent.Content for message in read for block in message.content)
        assert all(type(message.content) is tuple and type(message.role) is agent.Role for message in read)


def test_rows_of_older_versions_among_current_ones_read_as_each_reads_alone() -> None:
    current = codec.dump_message(agent.Message.assistant("now"))
    rows = [current, *_ROWS_OF_EVERY_KIND, current]
    assert codec.load_messages(rows) == [codec.load_message(row) for row in rows]
    assert codec.load_messages([row.encode() for row in rows]) == codec.load_messages(rows)


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ('{"v":4,"role":"user","content":[{"type":"text","text":"a","is_error":true}]}', "has no is_error"),
        ('{"v":4,"v":5,"role":"user","content":[]}', "newer than this agentsessions reads"),
        ('{"v":5,"role":"user","content":[]}', "newer than this agentsessions reads"),
        ('{"v":4,"role":"user","content":[]}{"v":4,"role":"user","content":[]}', "not JSON"),
        ('{"v":true,"role":"user","content":[]}', "versions are integers"),
        ('{"v":4,"role":"system","content":[]}', "malformed message"),
    ],
)
def test_a_row_that_cannot_be_read_among_others_is_a_format_error_naming_its_position(row: str, error: str) -> None:
    good = codec.dump_message(agent.Message.user("fine"))
    with pytest.raises(agent.FormatError, match=f"^message 2: .*{error}"):
        codec.load_messages([good, good, row, good])
    with pytest.raises(agent.FormatError, match=f"^message 1: .*{error}"):
        codec.load_messages([good.encode(), row.encode()])
