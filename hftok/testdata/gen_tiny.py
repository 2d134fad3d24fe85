#!/usr/bin/env python3
"""Writes the handcrafted test tokenizers tiny*.json (run from this folder).

One byte-level BPE vocabulary (the 256 byte characters as ids 0-255, then
the results of a few dozen merges chosen to exercise ranks, repeats and
ties), in four configurations that between them use every supported
normalizer, pre-tokenizer, Split behaviour and added-token option.
"""
import json
import unicodedata


def bytes_char():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BC = bytes_char()


def bl(s):
    """The byte-level spelling of text s."""
    return "".join(BC[b] for b in s.encode("utf-8"))


# merges as text pairs (spelled in byte-level form below)
MERGES = [
    (" ", "t"), ("h", "e"), (" t", "he"), ("i", "n"), (" ", "a"), ("e", "r"), ("o", "n"),
    (" ", " "), ("  ", "  "), ("\n", "\n"), ("r", "e"), (" ", "s"), ("in", "g"), ("'", "s"),
    (" a", "n"), (" an", "d"),
    ("c", "a"), (" ", "c"), (" c", "a"), (" ca", "f"), ("1", "2"), ("12", "3"),
    ("f", "u"), ("fu", "n"), ("fun", "c"), (" ", "{"), ("(", ")"), ("t", "h"),
    ("a", "a"), ("aa", "a"), (" ", "1"), ("\t", "\t"), (" ", "\n"), ("e", "n"),
    ("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c"), ("x", "y"), ("o", "r"), ("x", "y"),
    ("S", "T"), ("'", "S"), ("'", "ll"), ("l", "l"), ("'", "t"), (" ", "w"), (" w", "or"),
    (" wor", "ld"), ("l", "d"), ("H", "e"), ("He", "ll"), ("Hell", "o"), (":", "="),
    (" ", ":="), ("\r", "\n"), (" ", "("), ("1", "1"), ("11", "1"), ("0", "0"),
]
# byte pairs of multi-byte characters: é (C3 A9), 你 (E4 BD A0), — (E2 80 94)
BYTE_MERGES = [
    (b"\xc3", b"\xa9"), (b" ca" + b"f", b"\xc3\xa9"), (b"\xe4", b"\xbd"), (b"\xe4\xbd", b"\xa0"),
    (b"\xe2", b"\x80"), (b"\xe2\x80", b"\x94"),
]


def build_merges():
    out = []
    for a, b in MERGES:
        out.append((bl(a), bl(b)))
    for a, b in BYTE_MERGES:
        out.append(("".join(BC[x] for x in a), "".join(BC[x] for x in b)))
    return out


def vocab_for(merges, missing=()):
    vocab = {}
    for b in range(256):
        if b in missing:
            continue
        vocab[BC[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    return vocab


QWEN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
LLAMA3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def added(vocab, specs):
    """specs: (content, special, normalized, lstrip, rstrip, single_word)."""
    out = []
    nxt = len(vocab)
    for content, special, normalized, lstrip, rstrip, single in specs:
        if content in vocab:
            i = vocab[content]
        else:
            i = nxt
            nxt += 1
        out.append({"id": i, "content": content, "single_word": single, "lstrip": lstrip,
                    "rstrip": rstrip, "normalized": normalized, "special": special})
    return out


def model(vocab, merges, legacy=False, ignore=False, unk=None, fuse=False):
    return {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": fuse, "byte_fallback": False, "ignore_merges": ignore,
            "vocab": vocab, "merges": [a + " " + b for a, b in merges] if legacy else [[a, b] for a, b in merges]}


def byte_level(prefix=False, regex=False):
    return {"type": "ByteLevel", "add_prefix_space": prefix, "trim_offsets": False, "use_regex": regex}


def write(name, normalizer, pre, mdl, toks):
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": toks,
           "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": byte_level(),
           "decoder": byte_level(), "model": mdl}
    with open(name, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


merges = build_merges()
vocab = vocab_for(merges)
cafe_decomposed = unicodedata.normalize("NFD", "café")

# tiny.json: Qwen2's pipeline (NFC, Split with its regex, ByteLevel) and
# chat markers.
write("tiny.json", {"type": "NFC"},
      {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": QWEN}, "behavior": "Isolated", "invert": False},
          byte_level()]},
      model(vocab, merges),
      added(vocab, [
          ("<|endoftext|>", True, False, False, False, False),
          ("<|im_start|>", True, False, False, False, False),
          ("<|im_end|>", True, False, False, False, False),
          ("<think>", False, False, False, False, False),
          ("</think>", False, False, False, False, False),
          (cafe_decomposed, False, True, False, False, False),  # matched after NFC
          ("<mask>", True, False, True, True, False),
          ("[W]", False, False, False, False, True),
          (bl(" the"), False, False, False, False, False),  # in the vocab: takes its id
          ("ing", True, False, False, False, False),
      ]))

# tiny-gpt2.json: GPT-2's pipeline (ByteLevel with its own regex), with a
# prefix space, ignore_merges and legacy "a b" merges.
write("tiny-gpt2.json", None, byte_level(prefix=True, regex=True),
      model(vocab, merges, legacy=True, ignore=True),
      added(vocab, [("<|endoftext|>", True, False, False, False, False),
                    ("<|pad|>", True, True, True, False, False)]))

# tiny-llama.json: Llama 3's pipeline and ignore_merges.
write("tiny-llama.json", None,
      {"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
          byte_level(regex=False)]},
      model(vocab, merges, ignore=True),
      added(vocab, [("<|begin_of_text|>", True, False, False, False, False),
                    ("<|eot_id|>", True, False, False, False, False)]))

# tiny-misc.json: the other Split behaviours, Digits, String patterns,
# a Sequence normalizer, and unk_token for bytes 1-3 (missing).
mv = vocab_for(merges, missing=(1, 2, 3))
mv["<unk>"] = len(mv)
write("tiny-misc.json", {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Sequence", "normalizers": []}]},
      {"type": "Sequence", "pretokenizers": [
          {"type": "Digits", "individual_digits": False},
          {"type": "Split", "pattern": {"String": ", "}, "behavior": "MergedWithNext", "invert": False},
          {"type": "Split", "pattern": {"Regex": "[;|]"}, "behavior": "Removed", "invert": False},
          {"type": "Split", "pattern": {"Regex": "x+"}, "behavior": "Contiguous", "invert": True},
          {"type": "Split", "pattern": {"Regex": "^#|=$"}, "behavior": "MergedWithPrevious", "invert": False},
          {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}]},
          byte_level(prefix=True, regex=True)]},
      model(mv, merges, unk="<unk>", fuse=True),
      added(mv, [("<s>", True, False, False, True, False),
                 ("</s>", True, False, True, False, False),
                 ("[x]", False, True, False, False, True)]))
