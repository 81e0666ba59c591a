#!/usr/bin/python3
"""Builds the byte-level BPE tokenizer of tests/data/tiny-bart and its golden encodings.

1. Learns MERGES byte-level BPE merges on the small multilingual corpus below (English,
   Vietnamese, Korean, digits, punctuation, emoji, runs of spaces, newlines): the corpus is split
   with GPT-2's regular expression, every word's UTF-8 bytes become the printable characters of
   bytes_to_unicode, and the most frequent adjacent pair is merged, again and again (ties: the
   pair that sorts first). Writes vocab.json in the layout of BART checkpoints ("<s>" 0, "<pad>"
   1, "</s>" 2, "<unk>" 3, the 256 byte characters, one token per merge, "<mask>" last),
   merges.txt ("#version: 0.2", then one merge per line, by rank) and tokenizer_config.json.

2. Encodes TEXTS and PAIRS with a reference written from the original algorithm, not from the C++
   code: OpenAI's GPT-2 encoder.py (bytes_to_unicode, get_pairs, the bpe loop that merges the
   lowest-ranked pair until none is left, the pattern
   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+), with what
   Hugging Face `tokenizers` adds for BartTokenizerFast / RobertaTokenizerFast, as its Rust source
   documents it:
   - added_vocabulary.rs: special tokens written in the text are matched first (leftmost, longest
     at a position) and split the text; "<mask>" has lstrip, so it takes the whitespace before it,
     and its token is the text matched (" <mask>", with "<mask>"'s id);
   - each split (special token or regex word) is one word (word_ids);
   - offsets: every byte of a character is aligned to the whole character, a token spans its
     first to its last character, in code points of the text;
   - byte_level.rs process_offsets (RobertaProcessing trim_offsets=True, add_prefix_space=False):
     leading and trailing "Ġ" (or whitespace) characters of every token, " <mask>" included, are
     cut from its offsets;
   - roberta.rs: single "<s> $A </s>", pair "<s> $A </s> </s> $B </s>", every type id 0;
   - decoders/byte_level.rs: tokens mapped back to bytes (a token with a character outside the
     table keeps its own UTF-8), special tokens dropped with skip_special_tokens, invalid UTF-8
     replaced by U+FFFD (Rust's from_utf8_lossy; Python's errors="replace" is the same).
   Writes tests/data/tiny-bart/bpe_tokenizer_golden.json.

Run make_encoder_decoder.py afterwards: tiny-bart's vocab_size follows vocab.json.

  /usr/bin/python3 tests/data/make_bpe_tokenizer.py   (python3-regex for \\p{L})
"""
import collections
import json
import os
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "tiny-bart")
MERGES = 300
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
MASK = "<mask>"
# BartTokenizerFast's mask token is AddedToken("<mask>", lstrip=True): it takes the spaces before
# it. The others match only themselves.
LSTRIP = {MASK}

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

CORPUS = """The quick brown fox jumps over the lazy dog. The dog doesn't care, and the fox isn't
tired: they're friends, we've seen it, I'm sure you'd agree. She'll be there at 10:30 on
2024-05-17, with 3 cats and 12 dogs... Wait, what?! Prices: $4.99, 15%, 1,000,000 units.
    Indented line with   runs of   spaces   and trailing spaces
Tabs\tseparate\tvalues\there.

Tôi yêu Việt Nam. Chọn Chèn - Bảng để chèn một bảng mới vào tài liệu. Hà Nội có nhiều người.
Chúng tôi đang học tiếng Việt. Xin chào các bạn! Cảm ơn rất nhiều.
안녕하세요 세계. 랭체인은 대규모 언어 모델로 애플리케이션을 만드는 프레임워크입니다.
오늘 저녁에는 김치찌개를 먹었다. 표를 선택하여 문서에 새 표를 삽입합니다. 안녕 안녕하세요!
I ❤️ emoji 😀😀😀 and 🤗 hugs 🤗🤗, 👍 👍 👍 yes 😀 😀 🎉🎉 party 🎉.
The the the THE The quick quick brown, brown fox fox. Hello hello HELLO world world.
"""
CORPUS = CORPUS * 3 + "안녕하세요 " * 5 + "Việt Nam " * 5 + "😀 🤗 " * 5 + "\n\n\n" + "    " * 3

NFC_VI = "Tôi yêu Việt Nam"
TEXTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "trailing space ",
    "multiple   spaces  between    words",
    "   ",
    "",
    "line one\nline two\n\nline four\n",
    "tabs\tand\t\ttabs \t mixed",
    "a \n b\r\nc",
    "don't stop, she's here, we've, they're, I'm, you'd, I'll",
    "I'LL SHE'S 'sup",
    NFC_VI,
    unicodedata.normalize("NFD", NFC_VI),
    "café vs cafe\u0301",
    "안녕하세요 세계",
    "랭체인을 만드는 프레임워크",
    "I ❤️ emoji 😀😀 and 🤗!",
    "👩‍💻 works",
    "Call 555-1234 in 2024, pi is 3.14159.",
    "Wait... what?!",
    "The capital of France is <mask>.",
    "<mask> starts, ends <mask>",
    "two<mask><mask> and   <mask>",
    "<s>literal specials</s> <pad> <unk>",
    "<mas k> and <MASK> are text",
    "x\u00a0y\u3000z",
    "zebra quokka xylophone",
]
PAIRS = [
    ("Hello world", "Xin chào các bạn"),
    ("안녕하세요", "The <mask> is here."),
    (" spaced ", "  "),
]


def bytes_to_unicode():
    """GPT-2 encoder.py: a printable character for every byte, the printable Latin-1 bytes as
    themselves, the others (controls, space, ...) shifted to 256 and beyond."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(2 ** 8):
        if b not in bs:
            bs.append(b)
            cs.append(2 ** 8 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_ENCODER = bytes_to_unicode()
BYTE_DECODER = {c: b for b, c in BYTE_ENCODER.items()}


def get_pairs(word):
    """GPT-2 encoder.py: the set of adjacent symbol pairs of a word (a tuple of symbols)."""
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


def bpe(token, bpe_ranks):
    """GPT-2 encoder.py Encoder.bpe: merge the lowest-ranked pair everywhere, until none is left."""
    word = tuple(token)
    pairs = get_pairs(word)
    if not pairs:
        return [token]
    while True:
        bigram = min(pairs, key=lambda pair: bpe_ranks.get(pair, float("inf")))
        if bigram not in bpe_ranks:
            break
        first, second = bigram
        new_word = []
        i = 0
        while i < len(word):
            try:
                j = word.index(first, i)
                new_word.extend(word[i:j])
                i = j
            except ValueError:
                new_word.extend(word[i:])
                break
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new_word.append(first + second)
                i += 2
            else:
                new_word.append(word[i])
                i += 1
        word = tuple(new_word)
        if len(word) == 1:
            break
        pairs = get_pairs(word)
    return list(word)


def learn_merges(corpus, count):
    """Classic BPE training (Sennrich et al. 2016) on byte-level words."""
    words = collections.Counter(
        tuple(BYTE_ENCODER[b] for b in piece.encode("utf-8"))
        for piece in PATTERN.findall(corpus))
    merges = []
    for _ in range(count):
        pair_counts = collections.Counter()
        for word, freq in words.items():
            for pair in zip(word, word[1:]):
                pair_counts[pair] += freq
        if not pair_counts:
            break
        best = min(pair_counts, key=lambda pair: (-pair_counts[pair], pair))
        merges.append(best)
        merged = collections.Counter()
        for word, freq in words.items():
            new_word, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    new_word.append(word[i] + word[i + 1])
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            merged[tuple(new_word)] += freq
        words = merged
    return merges


def is_white_space(c):
    """Rust's char::is_whitespace (Unicode White_Space), which is also the pattern's \\s."""
    return regex.match(r"\s", c) is not None


def split_special(text):
    """added_vocabulary.rs find_matches: (special token or None, start, end) segments in code
    points."""
    specials = SPECIALS + [MASK]
    segments, start_offset, i = [], 0, 0
    while i < len(text):
        matches = [s for s in specials if text.startswith(s, i)]
        if not matches:
            i += 1
            continue
        token = max(matches, key=len)
        start, stop = i, i + len(token)
        if token in LSTRIP:
            while start > start_offset and is_white_space(text[start - 1]):
                start -= 1
        if start_offset < start:
            segments.append((None, start_offset, start))
        segments.append((token, start, stop))
        start_offset = i = stop
    if start_offset < len(text):
        segments.append((None, start_offset, len(text)))
    return segments


def trim(token, start, end):
    """byte_level.rs process_offsets with add_prefix_space=False."""
    def is_space(c):
        return c == BYTE_ENCODER[ord(" ")] or is_white_space(c)
    leading = 0
    for c in token:
        if not is_space(c):
            break
        leading += 1
    trailing = 0
    for c in reversed(token):
        if not is_space(c):
            break
        trailing += 1
    if leading:
        start = min(start + leading, end)
    if trailing and end >= trailing:
        end = max(end - trailing, start)
    return start, end


def tokenize(text, vocab, bpe_ranks):
    """Tokens, ids, code-point offsets and word ids of one text, without special tokens."""
    out = {"tokens": [], "ids": [], "offsets": [], "word_ids": []}
    word = 0
    for special, start, end in split_special(text):
        if special is not None:
            # The token is the text matched, lstrip's whitespace included (" <mask>").
            token = text[start:end]
            out["tokens"].append(token)
            out["ids"].append(vocab[special])
            out["offsets"].append(list(trim(token, start, end)))
            out["word_ids"].append(word)
            word += 1
            continue
        for match in PATTERN.finditer(text[start:end]):
            chars, aligned = [], []
            for k, c in enumerate(match.group(), start=start + match.start()):
                for b in c.encode("utf-8"):
                    chars.append(BYTE_ENCODER[b])
                    aligned.append(k)
            position = 0
            for token in bpe("".join(chars), bpe_ranks):
                first, last = position, position + len(token) - 1
                position += len(token)
                out["tokens"].append(token)
                out["ids"].append(vocab.get(token, vocab["<unk>"]))
                out["offsets"].append(list(trim(token, aligned[first], aligned[last] + 1)))
                out["word_ids"].append(word)
            word += 1
    return out


def byte_offsets(text, offsets):
    starts = [0]
    for c in text:
        starts.append(starts[-1] + len(c.encode("utf-8")))
    return [[starts[s], starts[e]] for s, e in offsets]


def encode(texts, vocab, bpe_ranks):
    """RobertaProcessing around one or two texts; specials get (0, 0) and no word."""
    tokens, ids, offsets, word_ids, sequence_ids, byte_spans = [], [], [], [], [], []

    def special(name):
        tokens.append(name)
        ids.append(vocab[name])
        offsets.append([0, 0])
        byte_spans.append([0, 0])
        word_ids.append(None)
        sequence_ids.append(None)

    for index, text in enumerate(texts):
        if index == 0:
            special("<s>")
        else:
            special("</s>")
        encoded = tokenize(text, vocab, bpe_ranks)
        tokens += encoded["tokens"]
        ids += encoded["ids"]
        offsets += encoded["offsets"]
        byte_spans += byte_offsets(text, encoded["offsets"])
        word_ids += encoded["word_ids"]
        sequence_ids += [index] * len(encoded["ids"])
        special("</s>")
    return {"input_ids": ids, "tokens": tokens, "offsets": offsets, "byte_offsets": byte_spans,
            "word_ids": word_ids, "sequence_ids": sequence_ids}


def decode(ids, id_to_token, skip_special_tokens):
    """decoders/byte_level.rs after Tokenizer::decode's special-token filter."""
    data = bytearray()
    for i in ids:
        if i not in id_to_token:
            continue
        token = id_to_token[i]
        if skip_special_tokens and token in SPECIALS + [MASK]:
            continue
        if all(c in BYTE_DECODER for c in token):
            data += bytes(BYTE_DECODER[c] for c in token)
        else:
            data += token.encode("utf-8")
    return data.decode("utf-8", errors="replace")


def main():
    merges = learn_merges(CORPUS, MERGES)
    assert len(merges) == MERGES, len(merges)
    vocab = {}
    for token in SPECIALS + list(BYTE_ENCODER.values()) + [a + b for a, b in merges] + [MASK]:
        assert token not in vocab, token
        vocab[token] = len(vocab)
    bpe_ranks = {pair: rank for rank, pair in enumerate(merges)}
    with open(os.path.join(OUT, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(OUT, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for a, b in merges:
            f.write(f"{a} {b}\n")
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 64, "add_prefix_space": False, "trim_offsets": True,
                   "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                   "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "mask_token": {"content": MASK, "lstrip": True, "rstrip": False,
                                  "normalized": False, "single_word": False},
                   "tokenizer_class": "BartTokenizer"}, f, indent=2)
        f.write("\n")

    id_to_token = {i: t for t, i in vocab.items()}
    golden = {"vocab_size": len(vocab), "encode": [], "pairs": [], "decode": []}
    for text in TEXTS:
        golden["encode"].append({"text": text, **encode([text], vocab, bpe_ranks)})
    for text, text_pair in PAIRS:
        golden["pairs"].append({"text": text, "text_pair": text_pair,
                                **encode([text, text_pair], vocab, bpe_ranks)})
    decode_cases = [case["input_ids"] for case in golden["encode"] + golden["pairs"]]
    byte_ids = {b: vocab[c] for b, c in BYTE_ENCODER.items()}
    # The first three bytes of U+1F600 (a truncated sequence: one U+FFFD), a lone continuation
    # byte, an overlong lead byte, a surrogate's encoding, and an id past the vocabulary.
    decode_cases += [
        [vocab["<s>"], byte_ids[0xF0], byte_ids[0x9F], byte_ids[0x98], byte_ids[ord("a")],
         vocab["</s>"]],
        [byte_ids[0x80], byte_ids[ord("a")], byte_ids[0xC0], byte_ids[0x80]],
        [byte_ids[0xED], byte_ids[0xA0], byte_ids[0x80], vocab[MASK]],
        [byte_ids[ord("w")], len(vocab) + 5],
    ]
    for ids in decode_cases:
        for skip in (False, True):
            golden["decode"].append({"ids": ids, "skip_special_tokens": skip,
                                     "text": decode(ids, id_to_token, skip)})
    with open(os.path.join(OUT, "bpe_tokenizer_golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: vocabulary of {len(vocab)} tokens, {len(merges)} merges, "
          f"{len(TEXTS)} texts, {len(PAIRS)} pairs, {len(golden['decode'])} decodings")
    multibyte = [a + b for a, b in merges if any(ord(c) >= 0x80 for c in a + b)]
    print(f"merges over multi-byte characters: {len(multibyte)}, e.g. {multibyte[:8]}")


if __name__ == "__main__":
    main()
