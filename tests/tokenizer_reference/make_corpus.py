#!/usr/bin/python3
"""Writes tests/data/multilingual_corpus.jsonl: the texts every tokenizer golden is made of.

Format: JSON Lines, one JSON string per line (UTF-8, not ASCII-escaped), so that a text can hold
"\\n", "\\r", tabs and anything else; line i of the file is text i of the goldens. Read it with
json.loads per line (or JSON.parse in Node); never split the file's text on "\\n" inside a text.

What is in it, in this order (each block is marked by a comment in TEXTS below):
  - the project's own multilingual text: queries, documents and sentences of
    tests/data/default-model-heldout.jsonl, default-model-first-steps.jsonl and
    translation-heldout.jsonl (English, Vietnamese, Korean; LibreOffice help, MPL-2.0, see
    checkpoints/default/MODEL_CARD.md), and the lines of checkpoints/*/MODEL_CARD.md (Markdown,
    tables, code);
  - every Vietnamese text again in decomposed form (NFD) when that differs, and a few in a mixed
    form (some letters precomposed, some not);
  - sentences written here: Korean, Japanese, Chinese, Thai, Arabic, Hindi, emoji (ZWJ sequences,
    skin tones, flags, keycaps, variation selectors), code, numbers, whitespace (runs of spaces,
    tabs, newlines, CR LF, only whitespace, empty), special-token strings typed inside text,
    mixed-case English with contractions, punctuation runs, URLs, and texts made of several lines;
  - combinations: each special-token string with text and spaces on either side.

Each text appears once. Deterministic: the same inputs give the same file byte for byte.

  /usr/bin/python3 tests/tokenizer_reference/make_corpus.py            # writes the committed file
  /usr/bin/python3 tests/tokenizer_reference/make_corpus.py --out FILE
"""
import argparse
import json
import os
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "tests", "data")
DEFAULT_OUT = os.path.join(DATA, "multilingual_corpus.jsonl")

VIETNAMESE_LETTERS = set("ăâđêôơưĂÂĐÊÔƠƯ") | {
    c for c in "àáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ"
}
VIETNAMESE_LETTERS |= {c.upper() for c in VIETNAMESE_LETTERS}

# Every text the tokenizers in use treat specially when it is typed inside ordinary text.
SPECIAL_STRINGS = [
    "<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]",
    "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
    "<|end_header_id|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
    "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
]

TEXTS = r"""
### Korean
나는 오늘 랭체인을 공부한다
안녕하세요, 만나서 반갑습니다!
서울특별시 종로구 세종대로 175
한국어는 교착어이며 조사가 발달했습니다.
그는 "내일 봐요"라고 말했다.
ㄱㄴㄷㄹ ㅏㅑㅓㅕ — 자모만 있는 줄
값이 1,234,567원입니다.
표를 삽입하려면 삽입 - 표를 선택하십시오.
띄어쓰기없이쓴아주긴한국어문장도토큰이되어야합니다
한글과 English가 섞인 문장 mixed한 text
### Japanese
今日はいい天気ですね。
東京都渋谷区神南1-2-3
吾輩は猫である。名前はまだ無い。
カタカナとひらがなと漢字が混ざった文章。
ｶﾀｶﾅ（半角）と全角ＡＢＣ１２３
「こんにちは」と彼女は言った。
### Chinese
我爱北京天安门。
这是一个测试句子，包含标点符号！
繁體中文與简体中文混合使用。
价格是￥12,345.67元。
机器学习模型的注意力可视化
### Thai
สวัสดีครับ ยินดีที่ได้รู้จัก
ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ
กรุงเทพมหานครเป็นเมืองหลวงของประเทศไทย
ราคา ๑๒๓ บาท (123 บาท)
### Arabic
مرحبا بالعالم
اللغة العربية تكتب من اليمين إلى اليسار.
السعر ١٢٣٤٥ ريال، أي 12345 ريال.
هذا نص عربي مع كلمة English في وسطه.
### Hindi
नमस्ते दुनिया
हिन्दी देवनागरी लिपि में लिखी जाती है।
क्षत्रिय, ज्ञान और श्री जैसे संयुक्ताक्षर
मूल्य ₹१२३ (123 रुपये)
### Other scripts
Привет, мир! Съешь же ещё этих мягких французских булок.
Γειά σου Κόσμε· ἀρχὴ ἥμισυ παντός.
שלום עולם
Ünïcödé àçcèñts in Français, Deutsch: Straße, Größe, Ærø, Øre, İstanbul, ı
ﬁ ﬂ ﬀ ligatures, ½ ¼ ², ℃ ™ Ⅻ, ① ② ③, ｆｕｌｌｗｉｄｔｈ
### Emoji
😀😃😄😁 faces
I ❤️ tokenizers 🤗
👍 👍🏻 👍🏼 👍🏽 👍🏾 👍🏿
👨‍👩‍👧‍👦 family, 👩‍💻 technologist, 🏳️‍🌈 flag, 🧑🏽‍🚀 astronaut
🇻🇳 🇰🇷 🇯🇵 🇺🇸 flags
1️⃣ 2️⃣ #️⃣ keycaps
☺ ☺️ ✌ ✌️ text and emoji presentation
🐈‍⬛🐻‍❄️❤️‍🔥
emoji😀inside😀words
### Code
def tokenize(text: str) -> list[str]:
	return text.split()
for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }
if (x != nullptr && x->size() >= 10) return -1;
const std::vector<int64_t> ids = {101, 7592, 2088, 102};
SELECT id, name FROM users WHERE name LIKE '%nguyễn%' ORDER BY id DESC;
<div class="heatmap" data-layer="3">attention</div>
{"model": "default", "text": "Tôi yêu Việt Nam", "max_length": 128}
$ curl -s 127.0.0.1:8080/attnscope.v1.AttentionService/Tokenize -d '{"text":"hi"}'
x = a**2 + b**2; y = x // 3; z = x % 7; w = ~x ^ (y | z) & 0xFF
#include <torch/torch.h>
    indented four spaces
		two tabs then text
lambda x: x if x else None  # comment
### Numbers
0
7
42
3.14159
-273.15
1,234,567
1.234.567,89
1 234 567
12345678901234567890123456789012345678901234567890
000000000000000000001
0.000000001
6.022e23 and 1e-9 and 2E+10
+84 912 345 678
2026-12-03T13:42:00Z
v0.23.2
100% 50‰ 3/4 ¾
IPv4 192.168.0.1, IPv6 2001:db8::1
### Whitespace
two  spaces
three   spaces
ten          spaces
 leading space
  two leading spaces
trailing space 
trailing spaces   
	leading tab
tab	between	words
tabs		and  spaces 	mixed
### Special-token strings in text
<s> Hello world </s>
<s>Hello</s>
[CLS] query [SEP] document [SEP]
<|begin_of_text|><|start_header_id|>user<|end_header_id|>

Hi!<|eot_id|>
Text with <|endoftext|> in the middle
<start_of_turn>user
Xin chào<end_of_turn>
<start_of_turn>model
<pad><pad><pad>
<unk> is unknown
The <mask> is blue.
The<mask>is blue.
<|im_start|>system
You are helpful.<|im_end|>
<bos>Gemma<eos>
<think>hmm</think>answer
almost special: <s >, < s>, <|endoftext| >, [CLS ], [cls], <MASK>, <Mask>
### English
The quick brown fox jumps over the lazy dog.
THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG.
tHe QuIcK bRoWn FoX
Don't stop. I'LL be there. She's, we've, they're, you'd, it'll, I'm. DON'T. Y'all'd've
rock 'n' roll, 'quoted', "double", ‘curly’, “curly double”, l’amour
Mr. O'Neil's dog's bone isn't here.
attention_probs[layer][head][query][key]
camelCaseIdentifier and snake_case_identifier and SCREAMING_CASE
antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis
### Punctuation
!!!???...
...!?!?!?
---===+++***
(((nested))) [[[brackets]]] {{{braces}}}
''' "" ``backticks`` ~~~ ^^^ ___ ""
@#$%^&*()_+-=[]{}|;':",./<>?
… — – ‒ · • ※ § ¶ † ‡
«guillemets» ‹single› „low“ ”reversed“
。、！？「」『』【】
### URLs
https://example.com/path/to/page?query=1&lang=vi#section
http://localhost:8080/attnscope.v1.AttentionService/GetAttention
https://vi.wikipedia.org/wiki/Việt_Nam
https://ko.wikipedia.org/wiki/%ED%95%9C%EA%B5%AD%EC%96%B4
mailto:someone@example.org and ftp://files.example.net/a_b-c.tar.gz
www.example.co.kr/검색?q=토큰
"""

# Texts made of several lines (and the other whitespace that cannot stand on one line of TEXTS).
MULTILINE = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    " \n ",
    "\t\n\t",
    "   \t  \n",
    "\u00a0",
    "\u3000",
    "line one\nline two",
    "line one\n\nline three after a blank line",
    "windows\r\nline endings\r\n",
    "old mac\rline ending",
    "trailing newline\n",
    "\nleading newline",
    "Tôi yêu Việt Nam.\n나는 한국어를 공부한다.\nI love tokenizers.",
    "def f():\n    return 1\n\n\nprint(f())\n",
    "# Title\n\n- item one\n- item two\n\n```sh\nnpm ci\n```\n",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nXin chào!<|eot_id|>",
    "<|im_start|>user\n안녕하세요<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n안녕하세요!<|im_end|>\n",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "tab\tseparated\tvalues\n1\t2\t3\n",
    "many\n\n\n\n\n\nnewlines",
    "spaces before newline   \nand after\n   indented",
    "a\u000bb\u000cc",  # vertical tab, form feed
    "control\u0001chars\u007f and \u0085 NEL",
    "line\u2028separator\u2029paragraph",
    "non-breaking\u00a0space, thin\u2009space, ideographic\u3000space, narrow\u202fno-break",
    "zero width space\u200binside, zero width joiner\u200dinside, non-joiner\u200cinside, BOM\ufeffinside",
    "\ufeffBOM at the start",
    "soft hyphen in hy\u00adphen, word\u2060joiner",
    "combining marks alone: \u0301\u0303 and a\u0308\u0304 and e\u0302\u0301",
    "variation selector \u845b\U000e0100 and private use \ue000\U000f0000",
]

WORDS = ["Hello", "xin chào", "안녕", "world", "Việt Nam", "注意", "🤗"]


def project_texts():
    texts = []
    with open(os.path.join(DATA, "default-model-heldout.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    # Every sentence and query, and the documents of every third pair (the documents are long; a
    # third keeps the corpus near 3,000 texts).
    for i, row in enumerate(rows):
        if "text" in row:  # kind "sentence"
            texts.append(row["text"])
            continue
        texts.append(row["query"])
        if i % 3 == 0:
            texts.append(row["positive"])
            texts.append(row["negative"])
    with open(os.path.join(DATA, "default-model-first-steps.jsonl"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            row = json.loads(line)
            if i % 2 == 0:
                texts.append(row["a"])
                if "b" in row:  # a masked-language-model example has no second text
                    texts.append(row["b"])
    with open(os.path.join(DATA, "translation-heldout.jsonl"), encoding="utf-8") as f:
        for i, line in enumerate(f):
            row = json.loads(line)
            if i % 2 == 0:
                texts.append(row["source"])
                texts.append(row["target"])
    for card in ("default", "translation"):
        with open(os.path.join(ROOT, "checkpoints", card, "MODEL_CARD.md"), encoding="utf-8") as f:
            texts.extend(line.rstrip("\n") for line in f if line.strip())
    return texts


def is_vietnamese(text):
    return any(c in VIETNAMESE_LETTERS for c in text)


def mixed_form(text):
    """Every other Vietnamese letter decomposed, the rest precomposed."""
    out = []
    n = 0
    for c in text:
        if c in VIETNAMESE_LETTERS:
            n += 1
            out.append(unicodedata.normalize("NFD", c) if n % 2 else c)
        else:
            out.append(c)
    return "".join(out)


def written_texts():
    texts = []
    for line in TEXTS.strip("\n").split("\n"):
        if line.startswith("### "):
            continue
        texts.append(line)
    return texts


def special_combinations():
    texts = []
    for i, s in enumerate(SPECIAL_STRINGS):
        w = WORDS[i % len(WORDS)]
        texts.extend([s, f"{w} {s}", f"{w}{s}{w}", f"{s} {w}", f"  {s}  {w}  ", f"{s}{s}"])
    return texts


def build():
    project = project_texts()
    texts = list(project)
    vietnamese = [t for t in project if is_vietnamese(t)]
    nfd = [unicodedata.normalize("NFD", t) for t in vietnamese]
    texts.extend(n for t, n in zip(vietnamese, nfd) if n != t)
    texts.extend(mixed_form(t) for t in vietnamese[:40])
    written = written_texts()
    texts.extend(written)
    texts.extend(unicodedata.normalize("NFD", t) for t in written if is_vietnamese(t))
    texts.extend(MULTILINE)
    texts.extend(special_combinations())
    # The project's data repeats queries and titles; each text once, at its first place.
    return list(dict.fromkeys(texts))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT)
    args = parser.parse_args()
    texts = build()
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        for t in texts:
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
    print(f"{args.out}: {len(texts)} texts, {sum(len(t) for t in texts)} code points")


if __name__ == "__main__":
    main()
