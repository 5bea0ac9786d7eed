"""dumps/loads: the one persisted form, versioned, verbatim."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import agentsessions as agent
from agentsessions import codec
from tests.support.paths import FIXTURES

TOOL_ARGS = '{"z":1,"a":[1, 2],"z":3}'


def _transcript() -> list[agent.Message]:
    return [
        agent.Message.user("find the bug \x00 in ünïcode 🐛"),
        agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("t1", "grep", TOOL_ARGS)]),
        agent.Message(agent.Role.USER, [agent.Content.tool_result("t1", "boom", is_error=True)]),
    ]


def test_round_trip_keeps_tool_arguments_byte_for_byte() -> None:
    loaded = agent.loads(agent.dumps(_transcript()))
    assert loaded == _transcript()
    assert loaded[1].content[0].input == TOOL_ARGS


def test_the_payload_carries_its_format_version() -> None:
    assert json.loads(agent.dumps([]))["v"] == agent.FORMAT_VERSION


def test_a_newer_format_is_refused_with_a_clear_error() -> None:
    payload = json.dumps({"v": agent.FORMAT_VERSION + 1, "messages": []})
    with pytest.raises(agent.FormatError, match="newer than this agentsessions reads"):
        agent.loads(payload)


@pytest.mark.parametrize("text", ["not json", "[]", '{"messages": []}', '{"v": 1, "messages": [{"role": "x"}]}'])
def test_foreign_text_is_a_format_error(text: str) -> None:
    with pytest.raises(agent.FormatError):
        agent.loads(text)


def test_dumps_refuses_a_non_message() -> None:
    with pytest.raises(TypeError, match="element 1 is str"):
        agent.dumps([agent.Message.user("a"), "b"])  # type: ignore[list-item]


def test_lone_surrogates_survive_and_the_output_is_valid_utf8() -> None:
    messages = [agent.Message.user("half a pair: \ud83d")]
    text = agent.dumps(messages)
    text.encode("utf-8")
    assert agent.loads(text) == messages
    assert codec.load_message(codec.dump_message(messages[0]).encode()) == messages[0]


@given(st.lists(st.text()), st.text())
def test_any_text_round_trips(texts: list[str], tool_input: str) -> None:
    messages = [agent.Message.user(t) for t in texts]
    messages.append(agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("id", "f", tool_input)]))
    assert agent.loads(agent.dumps(messages)) == messages


# st.text() never draws a surrogate; these draw them lone and in high-low pairs, which JSON
# would read back as one astral character.
_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
_PAIR = st.tuples(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDBFF), st.characters(min_codepoint=0xDC00, max_codepoint=0xDFFF)
).map("".join)
ANY_TEXT = st.lists(st.one_of(st.text(), _SURROGATE, _PAIR), max_size=4).map("".join)
TRICKY = ["x\ud83d\ude00y", "\ud83d\ude00", "\ude00\ud83d", "\udbff\udfff\ud800\udc00", "a\ud83d", "\ude00b", "😀"]


def _every_field(text: str) -> agent.Message:
    # Every str field of every block type, each holding ``text``.
    C = agent.Content
    return agent.Message(
        agent.Role.USER,
        [
            C.tool_result(text, text),
            C.tool_use(text, text, text),
            C.thinking(text, text),
            C.redacted_thinking(text),
            C(agent.ContentType.IMAGE, media_type=text, data=text or "x", tool_use_id=text),
            C(agent.ContentType.DOCUMENT, name=text, url=text or "x", tool_use_id=text),
            C.raw(text or "p", json.dumps({"type": text}), text=text),
        ],
    )


def _round_trips(message: agent.Message) -> None:
    for text in (agent.dumps([message]), codec.dump_message(message)):
        text.encode("utf-8")  # valid UTF-8: a store's text column takes it
    assert agent.loads(agent.dumps([message])) == [message]
    assert codec.load_message(codec.dump_message(message)) == message
    assert codec.load_message(codec.dump_message(message).encode()) == message


@pytest.mark.parametrize("text", TRICKY)
def test_surrogates_lone_or_adjacent_come_back_as_the_same_code_points(text: str) -> None:
    _round_trips(_every_field(text))
    loaded = codec.load_message(codec.dump_message(agent.Message.user(text)))
    assert [ord(c) for c in loaded.text] == [ord(c) for c in text]


@given(ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_any_str_in_any_field_round_trips(text: str, other: str, tool_input: str) -> None:
    C = agent.Content
    blocks = [
        C.tool_use(other, text + other, tool_input),
        C.thinking(text, other),
        C.redacted_thinking(other + text),
        C.image(media_type=text or "image/png", data=other or "AA"),
        C.document(url=text or "https://x", name=other),
        C.raw(other or "anthropic", json.dumps({"type": "x", "t": text}, ensure_ascii=False), text=text),
    ]
    _round_trips(agent.Message(agent.Role.ASSISTANT, blocks))


def test_a_field_with_surrogates_is_stored_as_pieces_and_others_as_plain_strings() -> None:
    message = agent.Message(agent.Role.USER, [agent.Content.tool_result("t1", "x\ud83d\ude00y😀")])
    assert codec.dump_message(message) == (
        '{"v":4,"role":"user","content":[{"type":"tool_result","text":["x",55357,56832,"y😀"],"tool_use_id":"t1"}]}'
    )


def test_the_new_fields_are_written_only_when_set() -> None:
    message = agent.Message(
        agent.Role.ASSISTANT, [agent.Content.thinking("hm", "sig"), agent.Content.image(url="https://x/a.png")]
    )
    assert codec.dump_message(message) == (
        '{"v":4,"role":"assistant","content":[{"type":"thinking","text":"hm","signature":"sig"},'
        '{"type":"image","url":"https://x/a.png"}]}'
    )


def test_version_1_text_still_loads_with_the_meaning_it_was_written_with() -> None:
    # Version 1 wrote each surrogate as a JSON escape, so an adjacent pair reads as one character.
    v1_message = '{"v":1,"role":"user","content":[{"type":"text","text":"lone \\ud83d, pair \\ud83d\\ude00, ü"}]}'
    assert codec.load_message(v1_message) == agent.Message.user("lone \ud83d, pair 😀, ü")
    v1_transcript = (
        '{"v":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":"{}"}]}]}'
    )
    assert agent.loads(v1_transcript) == [agent.Message(agent.Role.ASSISTANT, [agent.Content.tool_use("t", "f", "{}")])]


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('{"v":1,"role":"user","content":[{"type":"text","text":["a",55357]}]}', "text must be a str, got list"),
        ('{"v":2,"role":"user","content":[{"type":"text","text":["a",65]}]}', "Content.text holds 65"),
        ('{"v":2,"role":"user","content":[{"type":"text","id":["a",true]}]}', "Content.id holds True"),
        ('{"v":2,"role":"user","content":[{"type":"text","name":[1.5]}]}', "Content.name holds 1.5"),
        ('{"v":2,"role":"user","content":[{"type":"text","input":[["a"]]}]}', "Content.input holds \\['a'\\]"),
        ('{"v":2,"role":"user","content":[{"type":"text","text":{"a":1}}]}', "Content.text must be a str, got dict"),
        ('{"v":2,"role":"user","content":[1]}', "malformed message"),
    ],
)
def test_a_malformed_field_is_a_format_error_naming_it(text: str, complaint: str) -> None:
    with pytest.raises(agent.FormatError, match=complaint):
        codec.load_message(text)


@pytest.mark.parametrize("version", ["true", "false", "0", "-1", "1.0", '"1"', "null", "[1]"])
def test_a_version_that_is_not_an_integer_from_1_is_a_format_error(version: str) -> None:
    with pytest.raises(agent.FormatError, match='format version "v": '):
        agent.loads(f'{{"v": {version}, "messages": []}}')
    with pytest.raises(agent.FormatError, match='format version "v": '):
        codec.load_message(f'{{"v": {version}, "role": "user", "content": []}}')


@pytest.mark.parametrize("brackets", ["[", '{"a":'])
def test_deep_nesting_is_a_format_error_not_a_recursion_error(brackets: str) -> None:
    deep = brackets * 100_000
    with pytest.raises(agent.FormatError, match="nested too deeply"):
        agent.loads(deep)
    with pytest.raises(agent.FormatError, match="nested too deeply"):
        codec.load_message(f'{{"v":2,"role":"user","content":{deep}')


@pytest.mark.parametrize("flag", ['"no"', "1", "0", "null", '"true"'])
def test_a_stored_is_error_that_is_not_a_bool_is_a_format_error(flag: str) -> None:
    text = f'{{"v":2,"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","is_error":{flag}}}]}}'
    with pytest.raises(agent.FormatError, match=r"Content\.is_error must be a bool"):
        codec.load_message(text)


@given(ANY_TEXT)
def test_steer_and_id_encoding_round_trips_any_str(text: str) -> None:
    assert codec.decode_text(codec.encode_text(text)) == text


def test_steer_and_id_encoding_keeps_a_surrogate_pair_apart_from_the_astral_character() -> None:
    pair, astral = "\ud83d\ude00", "😀"
    assert codec.encode_text(pair) == b"\xed\xa0\xbd\xed\xb8\x80"
    assert codec.encode_text(astral) == "😀".encode()  # plain UTF-8: ids stored before read the same
    assert codec.decode_text(codec.encode_text(pair)) == pair
    assert codec.decode_text(codec.encode_text(astral)) == astral


# Rows written by the versions before this one, by their own code (tests/fixtures/format/).
ROWS = FIXTURES / "format"


def _written_then(version: int) -> list[agent.Message]:
    # What the fixtures hold; version 1 wrote the surrogate pair as escapes, so it reads as one character.
    pair = "😀" if version == 1 else "\ud83d\ude00"
    C = agent.Content
    return [
        agent.Message.user(f"find the bug \x00 in ünïcode 🐛, lone \ud83d, pair {pair}"),
        agent.Message(agent.Role.ASSISTANT, [C.of_text("let me look"), C.tool_use("t1", "grep", TOOL_ARGS)]),
        agent.Message(agent.Role.USER, [C.tool_result("t1", "boom", is_error=True), C.of_text("steer: hurry")]),
        agent.Message.assistant("done"),
    ]


def _written_by_3() -> list[agent.Message]:
    # Version 3 added thinking, media and raw blocks; its fixtures hold one of each.
    C = agent.Content
    return [
        agent.Message.user(
            "find the bug \x00 in ünïcode 🐛, lone \ud83d, pair \ud83d\ude00",
            C.image(media_type="image/png", data="iVBORw0KGgo="),
        ),
        agent.Message(
            agent.Role.ASSISTANT,
            [
                C.thinking("hmm", "sig=="),
                C.redacted_thinking("opaque"),
                C.of_text("let me look"),
                C.tool_use("t1", "grep", TOOL_ARGS),
            ],
        ),
        agent.Message(
            agent.Role.USER,
            [
                C.tool_result("t1", "boom", is_error=True),
                C.document(url="https://example.com/a.pdf", name="a"),
                C.of_text("steer: hurry"),
            ],
        ),
        agent.Message(
            agent.Role.ASSISTANT, [C.raw("anthropic", '{"type":"server_tool_use","id":"s1"}'), C.of_text("done")]
        ),
    ]


def _written_by_4() -> list[agent.Message]:
    # Version 4 added the compaction block; its fixtures are version 3's with one after them.
    summary = "Summary: the user asked to find a bug; grep failed (boom); the answer was done. \ud83d"
    return [*_written_by_3(), agent.Message(agent.Role.USER, [agent.Content.compaction(summary, covers=3)])]


def _written(version: int) -> list[agent.Message]:
    return {3: _written_by_3, 4: _written_by_4}.get(version, lambda: _written_then(version))()


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_rows_and_transcripts_of_every_version_read_unchanged(version: int) -> None:
    rows = (ROWS / f"v{version}_rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert all(row.startswith(f'{{"v":{version},') for row in rows)
    assert [codec.load_message(row) for row in rows] == _written(version)
    assert [codec.load_message(row.encode()) for row in rows] == _written(version)
    assert agent.loads((ROWS / f"v{version}_transcript.json").read_text(encoding="utf-8")) == _written(version)


def test_the_newest_fixtures_are_what_this_version_writes() -> None:
    # So the version-4 fixtures above are this code's own output, not hand-written text.
    rows = (ROWS / f"v{agent.FORMAT_VERSION}_rows.jsonl").read_text(encoding="utf-8").splitlines()
    assert rows == [codec.dump_message(m) for m in _written(agent.FORMAT_VERSION)]


def test_a_compaction_block_covers_at_least_one_message_and_counts_in_an_int() -> None:
    with pytest.raises(ValueError, match="covers at least one message"):
        agent.Content.compaction("s", covers=0)
    with pytest.raises(TypeError, match="covers must be an int"):
        agent.Content.compaction("s", covers="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a text block has no covers"):
        agent.Content(agent.ContentType.TEXT, "x", covers=2)
    block = agent.Content.compaction("s", covers=2)
    assert agent.Message(agent.Role.USER, [block]).text == ""  # a summary is not the user's text


def test_an_old_row_with_a_field_its_type_does_not_use_is_read_without_it() -> None:
    row = '{"v":2,"role":"user","content":[{"type":"text","text":"hi","tool_use_id":"t","is_error":true}]}'
    assert codec.load_message(row) == agent.Message.user("hi")
    with pytest.raises(agent.FormatError, match="a text block has no tool_use_id"):
        codec.load_message(row.replace('"v":2', '"v":3'))


@pytest.mark.parametrize(
    ("row", "complaint"),
    [
        ('{"v":5,"role":"user","content":[]}', "format version 5, newer than this agentsessions reads"),
        ('{"v":3,"role":"user","content":[{"type":"raw","name":"anthropic","data":"{oops"}]}', "not JSON"),
        ('{"v":3,"role":"user","content":[{"type":"raw","name":"anthropic","data":"[1]"}]}', "JSON object"),
        ('{"v":3,"role":"user","content":[{"type":"image","data":"AA","url":"u","media_type":"x"}]}', "exactly one"),
        ('{"v":3,"role":"user","content":[{"type":"hologram"}]}', "'hologram' is not a valid ContentType"),
    ],
)
def test_a_row_this_version_cannot_read_is_a_format_error_saying_why(row: str, complaint: str) -> None:
    for text in (row, row.encode()):
        with pytest.raises(agent.FormatError, match=complaint):
            codec.load_message(text)
