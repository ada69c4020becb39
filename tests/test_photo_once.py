"""The photo is prepared and encoded once: every model call of a conversation sends the byte-identical data URL,
and the caches key a loaded photo by its source bytes instead of hashing its pixels (benchmarks.agent_cpu)."""

import io
import json

from PIL import Image
from support import KGSearch, make_agent

import glasses_rag.models.vlm.base as vlm_base
from glasses_rag.core.hashing import cache_key, image_key, known_key
from glasses_rag.core.images import load_image, prepare
from glasses_rag.policies.model.policy import make_model_policy
from glasses_rag.testing.decision_model import respond
from glasses_rag.testing.fake_model_server import FakeOpenAIServer
from graph.agent import TurnInput


def _jpeg(colour: tuple[int, int, int], size: tuple[int, int] = (120, 90)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="JPEG")
    return buf.getvalue()


def _image_urls(body: dict) -> list[str]:
    return [
        p["image_url"]["url"]
        for m in body["messages"]
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


def _counting_encoder(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = vlm_base._encode

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(vlm_base, "_encode", counted)
    return calls


def test_every_model_call_of_a_turn_sends_the_same_photo_encoded_once(monkeypatch):
    encoded = _counting_encoder(monkeypatch)
    photo, info = prepare(*load_image(_jpeg((200, 30, 30))), egocentric=True)
    with FakeOpenAIServer(responder=respond) as srv:
        agent = make_agent(make_model_policy(f"openai:{srv.base_url}#fake-vlm"), KGSearch(), budget_s=20)
        tr = agent.run_turn(
            TurnInput(
                task=2,
                session_id="s",
                interaction_id="i",
                question="who makes this rocket?",
                image=photo,
                image_info=info,
            )
        )
        sent = list(srv.requests)
    assert [s.tool for s in tr.tool_calls()] == ["image_search", "web_search"]
    assert len(sent) == 4  # three decisions and the self-check
    urls = [u for body in sent for u in _image_urls(body)]
    assert len(urls) == 4 and len(set(urls)) == 1  # byte-identical in every request (a server's image cache keys on it)
    assert len(encoded) == 1


def test_a_loaded_photo_is_keyed_by_its_source_bytes():
    data = _jpeg((10, 120, 200))
    a, info_a = prepare(*load_image(data), egocentric=True)
    b, _ = prepare(*load_image({"bytes": data}), egocentric=True)
    assert a is not b and a.size == (960, 1280)
    assert known_key(a) is not None and cache_key(a) == cache_key(b) == known_key(a)
    other, _ = prepare(*load_image(_jpeg((10, 120, 141))), egocentric=True)
    assert cache_key(other) != cache_key(a)
    # the harness transform and the native one give different pixels, so different keys
    native, _ = prepare(*load_image(data), egocentric=True, mode="native")
    assert cache_key(native) != cache_key(a)
    # anything derived from the photo is a new object: hashed over its own pixels, never given the photo's key
    crop = a.crop((0, 0, 100, 100))
    assert known_key(crop) is None and cache_key(crop) == image_key(crop) not in (None, cache_key(a))
    # a PIL image handed in (no source bytes) is hashed over its pixels as before
    given, _ = load_image(Image.new("RGB", (50, 40), (1, 2, 3)))
    assert known_key(given) is None and cache_key(given) == image_key(given) is not None
    # image_key stays the pixel hash (disk caches such as the open web's keep it across versions)
    assert image_key(a) == image_key(b) != known_key(a)
    assert info_a.transforms == ["resized to 960x1280 (official harness)"]


def test_the_same_photo_in_another_conversation_is_not_encoded_again(monkeypatch):
    encoded = _counting_encoder(monkeypatch)
    data = _jpeg((90, 200, 40), (130, 95))
    first, _ = prepare(*load_image(data), egocentric=True)
    again, _ = prepare(*load_image(data), egocentric=True)
    url = vlm_base.image_to_data_url(first, 512)
    assert vlm_base.image_to_data_url(again, 512) == url
    assert vlm_base.image_to_data_url(first, 256) != url  # another size is another encoding
    assert len(encoded) == 2
    # the URL is what encoding the pixels gives
    assert url == vlm_base._encode(again, 512, 90)


def test_request_bodies_are_serialised_exactly_as_json_dumps():
    from glasses_rag.models.openai_client import dumps_body

    url = vlm_base.image_to_data_url(Image.new("RGB", (300, 200), (5, 6, 7)))
    image = {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}
    bodies = [
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": [image, {"type": "text", "text": 'q \u00e9 "x"'}]},
                {"role": "user", "content": [image]},
            ],
            "max_tokens": 5,
        },
        {"model": "m", "messages": [{"role": "user", "content": "no image"}]},
        {"model": "m", "messages": [{"role": "user", "content": [image, {"type": "text", "text": "\0image0\0"}]}]},
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "\0image0\0"}, image]}]},
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + "A" * 5000 + '"\\'}}
                    ],
                }
            ],
        },
    ]
    for body in bodies:
        assert dumps_body(body) == json.dumps(body)


def test_a_repeated_photo_is_not_decoded_or_resized_until_its_pixels_are_used(monkeypatch):
    import numpy as np

    import glasses_rag.core.images as images
    from glasses_rag.core.deferred_image import DeferredImage

    data = _jpeg((40, 80, 160), (140, 100))
    first, info_first = prepare(*load_image(data), egocentric=True)  # a new photo: decoded now
    decoded: list[int] = []
    real = images._decode

    def counted(*a, **k):
        decoded.append(1)
        return real(*a, **k)

    monkeypatch.setattr(images, "_decode", counted)
    raw, raw_info = load_image(data)
    again, info_again = prepare(raw, raw_info, egocentric=True)
    assert isinstance(raw, DeferredImage) and isinstance(again, DeferredImage)
    assert not raw.materialized and not again.materialized and decoded == []
    assert (raw.mode, raw.size, again.size) == ("RGB", (140, 100), (960, 1280))
    assert info_again == info_first and raw_info.sha256 == info_first.sha256
    # the content-keyed caches serve it without its pixels
    assert known_key(again) == known_key(first)
    url = vlm_base.image_to_data_url(first)
    assert vlm_base.image_to_data_url(again) == url and not again.materialized
    # its pixels, once used, are the eager path's, made once
    assert np.array_equal(np.asarray(again), np.asarray(first)) and again.materialized and decoded == [1]
    assert again.crop((0, 0, 10, 10)).tobytes() == first.crop((0, 0, 10, 10)).tobytes() and decoded == [1]
    assert image_key(again) == image_key(first) and raw.info == Image.open(io.BytesIO(data)).info


def test_a_deferred_image_is_made_once_across_threads():
    from concurrent.futures import ThreadPoolExecutor

    from glasses_rag.core.deferred_image import DeferredImage

    made: list[int] = []

    def make():
        made.append(1)
        return Image.new("RGB", (64, 48), (9, 8, 7))

    im = DeferredImage("RGB", (64, 48), make)
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda _: im.resize((32, 24)).tobytes(), range(16)))
    assert made == [1] and len(set(out)) == 1
    bad = DeferredImage("RGB", (10, 10), lambda: Image.new("L", (10, 10)))
    try:
        bad.load()
    except ValueError as e:
        assert "expected RGB" in str(e)
    else:
        raise AssertionError("a deferred image whose maker gives other pixels must refuse them")


def _blocks_from_scratch(text: str, size: int) -> list[str]:
    import hashlib

    out, h = [], b""
    for start in range(0, len(text) - size + 1, size):
        h = hashlib.blake2b(h + text[start : start + size].encode(), digest_size=6).digest()
        out.append(h.hex())
    return out


def test_prompt_blocks_reusing_the_last_text_equal_those_hashed_from_scratch():
    system = "You answer questions about a photo. " * 40
    texts = [system + "turn one " * 30, system + "turn one " * 30 + "more é" * 20, system + "other", "", "x" * 63]
    texts += [texts[1][:500] + "changed" + texts[1][507:], system[:64] + "é" * 100, texts[0]]
    for size in (64, 7):
        for text in texts + texts[::-1]:
            got = vlm_base.prompt_blocks(text, size)
            assert got == _blocks_from_scratch(text, size)
            got.append("not theirs")  # the caller's list: the reused hashes are not changed by it
    assert vlm_base.prompt_blocks(texts[0], 64) == _blocks_from_scratch(texts[0], 64)
