#!/usr/bin/env python3
"""Builds the training and held-out text of the default model from LibreOffice help pages.

Reads the HTML help of the Debian packages libreoffice-help-{en-us,vi,ko} with the standard library's
HTML parser and writes, deterministically (no wall clock, no unseeded randomness):

  OUT/train.jsonl        training examples, one JSON object a line:
                           {"lang", "a", "label": -1}            a paragraph for masked-LM only
                           {"lang", "a", "b", "label": 1 or 0}   query (title/heading, or a question
                                                                 made from a heading) + paragraph
  OUT/vocab_corpus.txt   every training text, one a line (input of `attnscope-train vocab`)
  OUT/required_tokens.txt  tokens the vocabulary holds whatever the help text's counts: the 2350
                         Hangul syllables of KS X 1001 (word-initial and "##"), and the Vietnamese
                         syllables of Debian's hunspell-vi dictionary that the text uses, so that
                         text outside the help ("Tôi yêu Việt Nam", "랭체인") keeps whole
                         syllables
  HELDOUT                the evaluation set, from pages the training never sees:
                           {"kind": "pair", "lang", "query", "positive", "negative"}
                           {"kind": "question", "lang", "query", "positive", "negative"}
                           {"kind": "sentence", "lang", "text"}

Questions are what a user types into a help search ("how do I insert a table", "làm sao chèn bảng",
"표를 어떻게 삽입하나요"): made from task headings ("Inserting Tables", "Chèn bảng", "표 삽입") by a
few templates per language, and paired with the heading's document.

Pages are split by a hash of their path inside the language folder (text/scalc/01/x.html), so one
page is held out in every language at once and no translation of it leaks into training.

Vietnamese and Korean help is only partly translated: a text counts for a language only when its
script says so (Hangul for Korean, Vietnamese letters for Vietnamese), untranslated English in
those packages is dropped; English comes from the English package.
"""
import argparse
import collections
import hashlib
import html.parser
import json
import os
import random
import re
import sys
import unicodedata

HELP_ROOT = "/usr/share/libreoffice/help"
LANG_DIRS = {"en": "en-US", "vi": "vi", "ko": "ko"}
HELDOUT_PERCENT = 5
SEED = 20261129
HELDOUT_PAIRS_PER_LANG = 200
HELDOUT_SENTENCES_PER_LANG = 150
HELDOUT_QUESTIONS_PER_LANG = 100
# Paragraphs shorter than this carry too little text to be a document or a masked-LM sentence.
MIN_PARAGRAPH_WORDS = 4
# A document is a heading's paragraphs joined up to about this many words.
MAX_DOCUMENT_WORDS = 60
MAX_QUERY_WORDS = 16
# Training only: the title is also paired with up to this many of its page's paragraphs.
EXTRA_TITLE_PARAGRAPHS = 4
# Training only: each query is paired with this many irrelevant paragraphs (its relevant document
# repeated as often, to keep the classes balanced). Fixed pairs repeated epoch after epoch let the
# model memorise them: after 7000 steps it ranked 85% of training pairs but 77% of held-out ones.
NEGATIVES_PER_QUERY = 4
# Questions repeat their heading's document, so they take fewer negatives: most of the steps stay
# with the headings and paragraphs.
NEGATIVES_PER_QUESTION = 2

# Letters that exist in Vietnamese but not in English (precomposed; NFC text).
VIETNAMESE_LETTERS = set(
    "ăâđêôơưàáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")


# English verbs: the words that follow "to" in the help text at least this often, less these.
MIN_VERB_COUNT = 5
NOT_VERBS = {"the", "a", "an", "all", "your", "those", "which", "this", "its", "each", "one",
             "zero", "another", "cells", "cell", "right", "left", "quickly", "be", "that", "it",
             "them", "these", "other", "any", "some", "their", "every", "both", "no", "two",
             "first", "last", "next", "previous", "top", "bottom", "page", "text", "end"}
# Vietnamese task headings start with a verb ("Chèn bảng", "Để chèn bảng").
VI_VERBS = {"chèn", "tạo", "xoá", "xóa", "thêm", "sửa", "chỉnh", "lưu", "mở", "đóng", "in", "chọn",
            "thay", "đổi", "dùng", "sử", "áp", "đặt", "hiện", "hiển", "ẩn", "tìm", "nhập", "xuất",
            "sao", "di", "chuyển", "sắp", "định", "bật", "tắt", "gỡ", "bỏ", "kiểm", "cập", "ghi",
            "gửi", "đánh", "canh", "căn", "tính", "xem", "vẽ", "kết", "chia", "gộp", "trộn", "quản",
            "bảo", "đổi", "xác", "thiết", "nhóm", "quay", "xoay", "lọc", "ngắt", "dán", "cắt"}
VI_TEMPLATES = ("làm sao {h}", "làm thế nào để {h}", "cách {h}", "{h} như thế nào")
# Korean task headings end with a verbal noun of 하다 ("표 삽입" -> "표를 어떻게 삽입하나요").
KO_VERBAL_NOUNS = {"삽입", "표시", "저장", "편집", "삭제", "설정", "추가", "사용", "선택", "복사",
                   "변환", "인쇄", "이동", "지정", "적용", "입력", "업데이트", "제거", "계산",
                   "관리", "변경", "정렬", "검색", "생성", "작성", "실행", "정의", "연결", "회전",
                   "확인", "수정", "포함", "숨김", "내보내기", "기록", "보호", "정렬", "구성",
                   "병합", "분할", "비교", "교체", "찾기"}
KO_OTHER_VERBS = {"만들기": "만드", "가져오기": "가져오", "내보내기": "내보내", "찾기": "찾",
                  "바꾸기": "바꾸", "열기": "여", "닫기": "닫", "숨기기": "숨기", "나누기": "나누"}
# Verbs that start an English imperative heading ("Insert Rows"); a heading's first word is often a
# noun that is also a verb ("Type", "Field", "Format"), so this list is closed.
EN_IMPERATIVES = {"insert", "open", "use", "create", "change", "add", "apply", "define", "edit",
                  "move", "enter", "convert", "draw", "set", "include", "remove", "calculate",
                  "save", "specify", "assign", "delete", "copy", "replace", "hide", "run", "modify",
                  "switch", "generate", "load", "export", "import", "choose", "close", "align",
                  "rename", "merge", "split", "protect", "undo", "start", "find", "rotate",
                  "resize", "update", "hyphenate", "compare", "lock", "paste", "share", "install",
                  "connect", "register", "exit", "show", "display", "select", "print", "restore",
                  "reset", "enable", "disable", "activate", "adjust", "arrange", "attach",
                  "combine", "configure", "crop", "distribute", "duplicate", "expand", "flip",
                  "freeze", "highlight", "join", "navigate", "organize", "recover",
                  "reload", "repeat", "scale", "send", "sign", "sort", "stop", "turn"}
EN_TEMPLATES = ("how do I {v}", "how to {v}", "how can I {v}")


VIETNAMESE_DICTIONARY = "/usr/share/hunspell/vi_VN.dic"


def required_tokens(texts):
    """KS X 1001's Hangul syllables in both positions, then the dictionary's Vietnamese syllables
    (NFC, lower-cased, letters only) that occur in `texts`, word-initial: Vietnamese writes one
    syllable a word, and a syllable the training text never shows would keep an untrained
    embedding."""
    tokens = []
    for high in range(0xB0, 0xC9):
        for low in range(0xA1, 0xFF):
            syllable = bytes([high, low]).decode("euc-kr")
            tokens += [syllable, "##" + syllable]
    if not os.path.exists(VIETNAMESE_DICTIONARY):
        sys.exit(f"no {VIETNAMESE_DICTIONARY}: install hunspell-vi")
    with open(VIETNAMESE_DICTIONARY, encoding="utf-8") as f:
        entries = [line.strip().split("/")[0] for line in f.readlines()[1:]]
    syllables = {unicodedata.normalize("NFC", e).lower() for e in entries}
    seen = {w for text in texts for w in re.findall(r"[^\W\d_]+", text.lower())}
    tokens += sorted(s for s in syllables if s in seen)
    return tokens


def english_verbs(texts):
    counts = collections.Counter()
    for text in texts:
        counts.update(m.group(1) for m in re.finditer(r"\b[Tt]o ([a-z]+)", text))
    return {w for w, n in counts.items() if n >= MIN_VERB_COUNT and w not in NOT_VERBS}


def base_form(gerund, verbs):
    """The verb of an -ing form whose base the help text uses ("inserting" -> "insert",
    "creating" -> "create", "setting" -> "set"), or None."""
    stem = gerund[:-3]
    for candidate in (stem, stem + "e", stem[:-1] if len(stem) > 2 and stem[-1] == stem[-2] else ""):
        if candidate in verbs:
            return candidate
    return None


def object_particle(noun):
    """을 after a final consonant (batchim), 를 after a vowel; 를 after a non-Hangul ending."""
    last = noun[-1]
    if 0xAC00 <= ord(last) <= 0xD7A3 and (ord(last) - 0xAC00) % 28:
        return "을"
    return "를"


def make_question(heading, lang, verbs, rng):
    """A short question a user might type for a task heading, or None for a heading that names no
    task ("Syntax", "Bề cao", "행 높이")."""
    text = heading.strip().rstrip(".:").strip()
    words = text.split()
    if len(words) < 2:
        return None
    if lang == "en":
        lower = [w.lower() for w in words]
        if lower[0] == "to" and lower[1] in verbs:
            task = " ".join(lower[1:])
        elif lower[0].endswith("ing") and base_form(lower[0], verbs):
            task = " ".join([base_form(lower[0], verbs)] + lower[1:])
        elif lower[0] in EN_IMPERATIVES:
            task = " ".join(lower)
        else:
            return None
        return rng.choice(EN_TEMPLATES).format(v=task)
    if lang == "vi":
        lower = text.lower()
        if lower.startswith("để "):
            return "làm thế nào " + lower
        if words[0].lower() not in VI_VERBS:
            return None
        return rng.choice(VI_TEMPLATES).format(h=lower)
    verb, obj = words[-1], " ".join(words[:-1])
    if not re.search(r"[\uac00-\ud7a3]$", obj) and not re.search(r"[A-Za-z0-9]$", obj):
        return None
    particle = object_particle(obj)
    if verb in KO_OTHER_VERBS:
        stem = KO_OTHER_VERBS[verb]
        return rng.choice((f"{obj}{particle} 어떻게 {stem}나요", f"{obj}{particle} {stem}는 방법"))
    if verb in KO_VERBAL_NOUNS:
        return rng.choice((f"{obj}{particle} 어떻게 {verb}하나요", f"{obj}{particle} {verb}하는 방법",
                           f"{obj} {verb}하려면"))
    return None


def is_hangul(ch):
    code = ord(ch)
    return 0xAC00 <= code <= 0xD7A3 or 0x1100 <= code <= 0x11FF or 0x3130 <= code <= 0x318F


def detect_language(text):
    """'ko', 'vi', 'en' or None (mixed or no letters), from the script of the letters."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters:
        return None
    hangul = sum(1 for ch in letters if is_hangul(ch))
    if hangul >= 0.3 * len(letters):
        return "ko"
    if hangul:
        return None
    words = re.findall(r"\w+", text.lower())
    vietnamese = sum(1 for w in words if any(ch in VIETNAMESE_LETTERS for ch in w))
    if vietnamese >= 0.15 * len(words):
        return "vi"
    if vietnamese == 0 and all(ord(ch) < 0x250 for ch in letters):
        return "en"
    return None


class HelpPageParser(html.parser.HTMLParser):
    """Collects the title (h1), headings (h2-h6) and paragraphs (p) of a help page's display area.

    Stops at the "related topics" block and the footer; skips hidden alternatives (the macOS key
    names) and scripts."""

    BLOCKS = {"h1", "h2", "h3", "h4", "h5", "h6", "p", "pre"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.items = []  # (kind, text): kind is "title", "heading" or "paragraph"
        self.in_display = False
        self.done = False
        self.block = None
        self.text = []
        self.skip_depth = 0  # depth inside hidden/script elements
        self.stack = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if self.done:
            return
        if attrs.get("id") == "DisplayArea":
            self.in_display = True
            return
        if not self.in_display:
            return
        if tag == "footer" or attrs.get("id") in ("SearchFrame", "DonationFrame") or \
                attrs.get("class") == "related":
            self.finish_block()
            self.done = True
            return
        if tag in ("br", "img", "meta", "input", "hr"):
            return
        hidden = "hidden" in attrs or tag in ("script", "style")
        self.stack.append((tag, hidden))
        if hidden:
            self.skip_depth += 1
        if tag in self.BLOCKS:
            self.finish_block()
            self.block = tag
            self.text = []

    def handle_endtag(self, tag):
        if self.done or not self.in_display:
            return
        # Pop to the matching open tag (HTML end tags may close several elements).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for _, hidden in self.stack[i:]:
                    if hidden:
                        self.skip_depth -= 1
                del self.stack[i:]
                break
        if tag == self.block:
            self.finish_block()

    def handle_data(self, data):
        if self.in_display and not self.done and self.block and self.skip_depth == 0:
            self.text.append(data)

    def finish_block(self):
        if self.block:
            text = " ".join("".join(self.text).split())
            if text:
                kind = {"h1": "title", "p": "paragraph", "pre": "paragraph"}.get(
                    self.block, "heading")
                self.items.append((kind, text))
        self.block = None
        self.text = []


def word_count(text):
    return len(text.split())


def truncate_words(text, limit):
    words = text.split()
    return " ".join(words[:limit])


def extract_page(path):
    parser = HelpPageParser()
    with open(path, encoding="utf-8") as f:
        parser.feed(f.read())
    parser.close()
    parser.finish_block()
    return parser.items


def page_sections(items, lang):
    """(query, document) pairs of one page: the title with the page's first paragraphs, each heading
    with the paragraphs under it; extra positives for training (a heading with each of its
    paragraphs alone, the title with further paragraphs of its page); every paragraph of the page's
    language."""
    sections = []  # [query, [paragraphs]]
    paragraphs = []
    for kind, text in items:
        if kind in ("title", "heading"):
            sections.append([text, []])
        elif detect_language(text) == lang and word_count(text) >= MIN_PARAGRAPH_WORDS:
            paragraphs.append(text)
            if sections:
                sections[-1][1].append(text)
    # The title's document is the page's first paragraphs when the title has none of its own.
    if sections and not sections[0][1] and paragraphs:
        sections[0][1] = paragraphs[:2]
    pairs, extra_pairs = [], []
    for index, (query, docs) in enumerate(sections):
        if not docs or detect_language(query) != lang or word_count(query) > MAX_QUERY_WORDS:
            continue
        document = []
        for doc in docs:
            if document and word_count(" ".join(document + [doc])) > MAX_DOCUMENT_WORDS:
                break
            document.append(doc)
        pairs.append((query, truncate_words(" ".join(document), MAX_DOCUMENT_WORDS)))
        own = docs if len(docs) > 1 else []
        if index == 0:
            own = own + [p for p in paragraphs[:EXTRA_TITLE_PARAGRAPHS] if p not in docs]
        extra_pairs.extend((query, truncate_words(doc, MAX_DOCUMENT_WORDS)) for doc in own)
    return pairs, extra_pairs, paragraphs


def is_heldout(relative_path):
    digest = hashlib.sha256(relative_path.encode()).hexdigest()
    return int(digest[:8], 16) % 100 < HELDOUT_PERCENT


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for train.jsonl and vocab_corpus.txt")
    parser.add_argument("--heldout", required=True, help="path of the held-out JSONL file")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    rng = random.Random(SEED)
    # Questions draw from a generator of their own too, so adding them left the other examples
    # as they were.
    question_rng = random.Random(SEED + 2)
    # The extra negatives draw from a generator of their own, so that the held-out set stays the
    # same whatever NEGATIVES_PER_QUERY is.
    extra_rng = random.Random(SEED + 1)
    train, heldout = [], []
    question_counts = {}
    vocab_texts = []
    for lang in ("en", "vi", "ko"):
        root = os.path.join(HELP_ROOT, LANG_DIRS[lang])
        files = []
        for folder, _, names in os.walk(os.path.join(root, "text")):
            files.extend(os.path.join(folder, n) for n in names if n.endswith(".html"))
        if not files:
            sys.exit(f"no help pages under {root}: install libreoffice-help-{LANG_DIRS[lang].lower()}")
        files.sort()
        pages = {"train": [], "heldout": []}
        page_items = [(path, extract_page(path)) for path in files]
        verbs = english_verbs(text for _, items in page_items for _, text in items)
        for path, items in page_items:
            relative = os.path.relpath(path, root)
            pairs, extra_pairs, paragraphs = page_sections(items, lang)
            if pairs or paragraphs:
                split = "heldout" if is_heldout(relative) else "train"
                if split == "train":
                    pairs += extra_pairs
                pages[split].append((relative, pairs, paragraphs))

        for split, split_pages in pages.items():
            # Generic headings ("Syntax", "Example") head many pages: such a query has no single
            # relevant document, so it is dropped.
            query_pages = collections.Counter()
            for _, pairs, _ in split_pages:
                query_pages.update({q.lower() for q, _ in pairs})
            all_paragraphs = [(i, p) for i, (_, _, ps) in enumerate(split_pages) for p in ps]
            def draw_negative(generator, page_index):
                while True:
                    other_page, negative = generator.choice(all_paragraphs)
                    if other_page != page_index:
                        return truncate_words(negative, MAX_DOCUMENT_WORDS)

            examples = []
            for page_index, (_, pairs, paragraphs) in enumerate(split_pages):
                for query, document in pairs:
                    if query_pages[query.lower()] > 1:
                        continue
                    negatives = [draw_negative(rng, page_index)]
                    if split == "train":
                        negatives += [draw_negative(extra_rng, page_index)
                                      for _ in range(NEGATIVES_PER_QUERY - 1)]
                    examples.append((query, document, negatives))
                if split == "train":
                    for paragraph in paragraphs:
                        train.append({"lang": lang, "a": paragraph, "label": -1})
                        vocab_texts.append(paragraph)
            questions = []
            for query, document, negatives in examples:
                question = make_question(query, lang, verbs, question_rng)
                if question:
                    questions.append((question, document, negatives[:NEGATIVES_PER_QUESTION]))
            if split == "train":
                for query, document, negatives in examples + questions:
                    for negative in negatives:
                        train.append({"lang": lang, "a": query, "b": document, "label": 1})
                        train.append({"lang": lang, "a": query, "b": negative, "label": 0})
                    vocab_texts.append(query)
                question_counts[lang] = len(questions)
            else:
                rng.shuffle(examples)
                for query, document, negatives in examples[:HELDOUT_PAIRS_PER_LANG]:
                    heldout.append({"kind": "pair", "lang": lang, "query": query,
                                    "positive": document, "negative": negatives[0]})
                sentences = [truncate_words(p, MAX_DOCUMENT_WORDS)
                             for _, _, ps in split_pages for p in ps]
                rng.shuffle(sentences)
                for text in sentences[:HELDOUT_SENTENCES_PER_LANG]:
                    heldout.append({"kind": "sentence", "lang": lang, "text": text})
                question_rng.shuffle(questions)
                for query, document, negatives in questions[:HELDOUT_QUESTIONS_PER_LANG]:
                    heldout.append({"kind": "question", "lang": lang, "query": query,
                                    "positive": document, "negative": negatives[0]})
        counts = collections.Counter((e["lang"], e["label"]) for e in train if e["lang"] == lang)
        print(f"{lang}: pages train {len(pages['train'])} held-out {len(pages['heldout'])}; "
              f"train paragraphs {counts[(lang, -1)]}, pairs {counts[(lang, 1)]} positive "
              f"+ {counts[(lang, 0)]} negative, of them {question_counts[lang]} questions "
              f"x {NEGATIVES_PER_QUESTION}", file=sys.stderr)

    with open(os.path.join(args.out, "train.jsonl"), "w", encoding="utf-8") as f:
        for example in train:
            f.write(json.dumps(example, ensure_ascii=False) + "\n")
    with open(os.path.join(args.out, "vocab_corpus.txt"), "w", encoding="utf-8") as f:
        for text in vocab_texts:
            f.write(text + "\n")
    with open(os.path.join(args.out, "required_tokens.txt"), "w", encoding="utf-8") as f:
        for token in required_tokens(vocab_texts):
            f.write(token + "\n")
    with open(args.heldout, "w", encoding="utf-8") as f:
        for example in heldout:
            f.write(json.dumps(example, ensure_ascii=False) + "\n")
    kinds = collections.Counter((e["lang"], e["kind"]) for e in heldout)
    print("held-out: " + ", ".join(f"{l} {k} {n}" for (l, k), n in sorted(kinds.items())),
          file=sys.stderr)


if __name__ == "__main__":
    main()
