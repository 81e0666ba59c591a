#!/usr/bin/env python3
"""Builds the general-domain relevance examples of the default model from Debian's own text.

The help pages (scripts/extract_help_text.py) teach one domain and one style; a query's words that
the help never uses ("LangChain", "랭체인") then carry no matching signal. This adds, in English,
Vietnamese and Korean:

  - Debian's package descriptions (the Translation-en, -vi and -ko files of bookworm's
    main/i18n, which apt fetches when Acquire::Languages names those languages): the short
    description as a query for the long one; "what is <package>" for the description;
  - the messages of translation catalogues (.mo) of Debian packages (msgid in English, msgstr in
    Vietnamese and Korean): command help, error messages, UI labels;

cut into query/document pairs that reward a query's words appearing in the document, whatever the
words are:

  - inverse cloze: a sentence of a description or multi-line message as the query, the rest of
    its paragraph as the relevant document;
  - keywords: one to four consecutive words of a text, or two or three picked in order, as the
    query for that text, half of them in a question template ("how to ...", "... 방법"); half the
    Korean ones without their particles and endings ("비가 내리니" -> "비 내리"), since a Korean
    question seldom repeats the document's word forms;
  - names: "what is X", "X là gì", "X 뭐야" for a document that names X, where X is the package
    or, half the time, a made-up name (random Latin or Hangul syllables) put into both query and
    document, so that the model learns "the same token in both" rather than particular words;
    irrelevant documents get made-up names of their own, so that an odd token is no signal;
  - irrelevant documents: other texts of the same language, four per query (the relevant one
    repeated as often), one of them sharing a word with the query when the query has three or
    more (lexical-overlap negative: a shared word alone is not relevance).

Writes OUT/general.jsonl in train.jsonl's format ({"lang", "a", "b", "label"}; {"lang", "a",
"label": -1} for masked-LM text). Texts are never copied from the general-domain held-out set
(--heldout, tests/data/general-domain-heldout.jsonl), nor do they name the README tutorials'
examples (LangChain), which are acceptance checks: such texts are dropped, and the script stops
if a held-out sentence is still found in the output. Deterministic: seeded generators, inputs
sorted.
"""
import argparse
import collections
import gettext
import glob
import json
import os
import random
import re
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extract_help_text import detect_language  # noqa: E402

SEED = 20261205
LANGUAGES = ("en", "vi", "ko")
# English has 64000 descriptions; this many (drawn by the seed) keep the languages comparable.
MAX_DESCRIPTIONS = {"en": 6000, "vi": 10000, "ko": 10000}
MAX_DOCUMENT_WORDS = 60
MIN_SENTENCE_WORDS = 4
NEGATIVES_PER_QUERY = 4
# Per language at most this many query units of each kind, so one source does not crowd out the
# others (English catalogues and descriptions are far larger than Vietnamese ones). Korean gets
# more keyword searches: its words change form, and stems are matched only by seeing many.
MAX_UNITS_PER_KIND = {"cloze": 6000, "description": 6000, "name": 8000}
MAX_KEYWORD_UNITS = {"en": 15000, "vi": 15000, "ko": 30000}
# Keyword searches are the plainest form of "the query's words are in the document".
KEYWORD_QUERIES_PER_TEXT = {"en": 2, "vi": 2, "ko": 3}
# Tutorial examples and their words, kept out of the training text.
EXCLUDED = ("langchain", "lang chain", "랭체인", "날씨가 정말 좋다", "trời đẹp quá",
            "weather is really nice")

NAME_TEMPLATES = {
    "en": ("what is {x}", "what's {x}", "what is {x} used for", "tell me about {x}", "{x}",
           "{x} meaning", "explain {x}"),
    "vi": ("{x} là gì", "{x} là cái gì", "{x} dùng để làm gì", "giới thiệu về {x}",
           "cho tôi biết về {x}", "{x}", "{x} là gì vậy"),
    "ko": ("{x} 뭐야", "{x}{i} 뭐예요", "{x}{ira} 무엇인가요", "{x}에 대해 알려줘", "{x}",
           "{x} 설명", "{x}{i} 뭐지", "{x}{ira}?"),
}
HANGUL_SYLLABLES = [bytes([high, low]).decode("euc-kr")
                    for high in range(0xB0, 0xC9) for low in range(0xA1, 0xFF)]
KEYWORD_TEMPLATES = {
    "en": ("how to {k}", "what is {k}", "{k}?", "about {k}", "why {k}", "where is {k}",
           "how do I {k}", "{k} help"),
    "vi": ("{k} là gì", "cách {k}", "{k} như thế nào", "tại sao {k}", "{k} ở đâu", "{k} không",
           "làm sao {k}", "hỏi về {k}"),
    "ko": ("{k} 뭐야", "{k} 방법", "{k} 어떻게 해", "{k} 알려줘", "{k}?", "왜 {k}", "{k} 어디",
           "{k} 하는 법", "{k} 어때", "{k} 있어?", "{k} 추천", "{k} 소식", "{k} 해?", "{k} 돼?"),
}
# Korean attaches particles and endings to the word ("비가", "내리니", "만들었어"), so a question
# rarely repeats the document's word forms ("내일 비 와?" for "내일은 ... 비가 내리니"). Keyword
# searches in Korean drop these from their words half the time, so that a shared stem counts
# as a match. Particles first, longest first; a word keeps at least one syllable before a
# particle and two before a verb ending ("합니다" stays whole).
KOREAN_PARTICLES = ("은", "는", "이", "가", "을", "를", "에", "의", "로", "와", "과", "도", "만", "으로",
                    "에서", "에게", "까지", "부터", "처럼", "보다", "이나", "에는", "에서는", "으로는",
                    "이라", "이란")
KOREAN_VERB_ENDINGS = ("합니다", "습니다", "입니다", "니다", "하세요", "세요", "하고", "하며", "하면",
                       "해서", "했습니다", "했다", "한다", "된다", "됩니다", "되는", "하는", "하려면",
                       "려면", "으려면", "고", "며", "면", "서", "는데", "지만", "니", "으니", "었고",
                       "았고", "었다", "았다")
KOREAN_ENDINGS = sorted(((e, 1) for e in KOREAN_PARTICLES), key=lambda e: -len(e[0])) + sorted(
    ((e, 2) for e in KOREAN_VERB_ENDINGS), key=lambda e: -len(e[0]))
LATIN_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "qu", "r", "s", "t",
                "v", "w", "x", "z", "br", "ch", "cl", "dr", "fl", "gr", "kr", "pl", "pr", "sh",
                "st", "th", "tr", "v", "y")
LATIN_NUCLEI = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
LATIN_CODAS = ("", "", "", "n", "r", "s", "x", "l", "m", "k", "t", "ng", "ck")


def has_batchim(word):
    last = word[-1]
    if 0xAC00 <= ord(last) <= 0xD7A3:
        return (ord(last) - 0xAC00) % 28 != 0
    return last.lower() in "lmnrkptbdg"


def made_up_name(rng, lang):
    """A name no vocabulary knows: Latin syllables, sometimes CamelCase or with a digit, or two to
    four of the vocabulary's Hangul syllables (KS X 1001's 2350; half the Korean names, a tenth of
    the others)."""
    if rng.random() < (0.5 if lang == "ko" else 0.1):
        return "".join(rng.choice(HANGUL_SYLLABLES) for _ in range(rng.randint(2, 4)))
    kind = rng.random()
    parts = []
    for _ in range(rng.randint(1, 3)):
        parts.append(rng.choice(LATIN_ONSETS) + rng.choice(LATIN_NUCLEI) + rng.choice(LATIN_CODAS))
    if kind < 0.55:
        name = "".join(p.capitalize() for p in parts)
    elif kind < 0.75:
        name = "".join(parts).capitalize()
    else:
        name = "".join(parts)
    if rng.random() < 0.1:
        name += str(rng.randint(2, 99))
    return name


def name_query(name, lang, rng):
    template = rng.choice(NAME_TEMPLATES[lang])
    batchim = has_batchim(name)
    return template.format(x=name, i="이" if batchim else "가", ira="이란" if batchim else "란")


def korean_stem(word):
    """`word` without the first of KOREAN_ENDINGS it ends with and still keeps enough of."""
    for ending, keep in KOREAN_ENDINGS:
        left = len(word) - len(ending)
        if word.endswith(ending) and left >= keep:
            return word[:left]
    return word


def name_document(name, text, lang, rng):
    """`text` made to name `name`: as its subject ("X là ...", "X는 ...", "X is ...") or prefixed
    ("X: ...")."""
    if rng.random() < 0.5:
        return f"{name}: {text}"
    if lang == "ko":
        return f"{name}{'은' if has_batchim(name) else '는'} {text}"
    if lang == "vi":
        return f"{name} là {lower_first(text)}"
    return f"{name} is {lower_first(text)}"


def lower_first(text):
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


def normalise(text):
    return " ".join(unicodedata.normalize("NFC", text).split())


def excluded(text):
    lower = text.lower()
    return any(e in lower for e in EXCLUDED)


def truncate_words(text, limit):
    return " ".join(text.split()[:limit])


def split_sentences(text):
    parts = re.split(r"(?<=[.!?。])\s+", text)
    return [p.strip() for p in parts if p.strip()]


def display_width(text):
    return sum(2 if 0xAC00 <= ord(ch) <= 0xD7A3 else 1 for ch in text)


def cut_word(line, next_line):
    """Whether a Korean description line was wrapped inside a word: many are cut at exactly 75-76
    columns (a Hangul syllable two), whatever the word ("전\n쟁"), while wrapped words give lines
    of any length."""
    return (display_width(line) >= 75 and re.match(r"[\uac00-\ud7a3]", next_line) is not None
            and re.search(r"[\uac00-\ud7a3]$", line) is not None)


def read_descriptions(path, lang):
    """(package, short description, [paragraphs]) of a Translation-xx file."""
    out = []
    package, short, paragraphs, current = None, None, [], []
    previous = ""

    def flush():
        if package and short:
            if current:
                paragraphs.append(" ".join(current))
            out.append((package, short, [p for p in paragraphs if p]))

    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("Package: "):
                flush()
                package, short, paragraphs, current = line[9:].strip(), None, [], []
            elif line.startswith(f"Description-{lang}: "):
                short = normalise(line.split(": ", 1)[1])
            elif line.startswith(" ") and short is not None:
                body = line[1:].strip()
                if body == ".":
                    paragraphs.append(" ".join(current))
                    current = []
                elif body and not body.startswith(("*", "-", "+", "o ")):
                    if current and lang == "ko" and cut_word(previous, body):
                        current[-1] += body
                    else:
                        current.append(body)
                previous = line
    flush()
    return [(p, s, [normalise(x) for x in ps]) for p, s, ps in out]


FORMAT = re.compile(r"%(\d+\$)?[-+ #0]*\d*(\.\d+)?(hh|h|ll|l|L|z|j|t)?[diouxXeEfgGcsSpn%]|"
                    r"\{\w*\}|\$\{?\w+\}?|<[^>]+>|`|'")
OPTION = re.compile(r"^\s*(-\w(,\s*|\s+))?(--?[\w-]+(\[?=[\w\[\]-]+\]?)?,?\s*)*\s+")


def clean_message(text):
    text = text.replace("_", "").replace("&", "")
    lines = []
    for line in text.split("\n"):
        if line.lstrip().startswith("-"):
            line = OPTION.sub("", line, count=1)
        line = normalise(FORMAT.sub(" ", line))
        line = line.strip(" :;,")
        lines.append(line)
    return lines


def read_catalogues(folder):
    """Per language, (source, paragraphs) of every message: msgstr for vi and ko, msgid (from the
    Vietnamese catalogue) for en. A message's lines joined into paragraphs at blank lines."""
    texts = {lang: [] for lang in LANGUAGES}
    for lang in ("vi", "ko"):
        for path in sorted(glob.glob(os.path.join(folder, f"usr/share/locale/{lang}/LC_MESSAGES/*.mo"))):
            with open(path, "rb") as f:
                catalogue = gettext.GNUTranslations(f)._catalog
            domain = os.path.basename(path)[:-3]
            for msgid, msgstr in sorted((k, v) for k, v in catalogue.items()
                                        if isinstance(k, str) and k and isinstance(v, str)):
                sources = [(lang, msgstr)] + ([("en", msgid)] if lang == "vi" else [])
                for text_lang, text in sources:
                    paragraphs, current = [], []
                    for line in clean_message(text) + [""]:
                        if line:
                            current.append(line)
                        elif current:
                            paragraphs.append(" ".join(current))
                            current = []
                    paragraphs = [p for p in paragraphs
                                  if len(p.split()) >= MIN_SENTENCE_WORDS
                                  and detect_language(p) == text_lang]
                    if paragraphs:
                        texts[text_lang].append((domain, paragraphs))
    for lang in LANGUAGES:
        seen = set()
        unique = []
        for domain, paragraphs in texts[lang]:
            key = tuple(paragraphs)
            if key not in seen:
                seen.add(key)
                unique.append((domain, paragraphs))
        texts[lang] = unique
    return texts


def content_words(text):
    return [w for w in re.findall(r"[^\W\d_]{2,}", text.lower())]


class Builder:
    def __init__(self, lang, rng):
        self.lang = lang
        self.rng = rng
        self.units = collections.defaultdict(list)  # kind -> [(query, document, source)]
        self.documents = []  # (source, text): the pool irrelevant documents come from
        self.singles = []

    def add_document(self, source, text):
        """`text` and, when it has several, each of its sentences: irrelevant documents as short as
        a one-sentence answer too."""
        self.documents.append((source, truncate_words(text, MAX_DOCUMENT_WORDS)))
        sentences = split_sentences(text)
        if len(sentences) > 1:
            self.documents.extend((source, truncate_words(t, MAX_DOCUMENT_WORDS))
                                  for t in sentences if len(t.split()) >= MIN_SENTENCE_WORDS)

    def add_unit(self, kind, query, document, source):
        if excluded(query) or excluded(document):
            return
        self.units[kind].append((query, truncate_words(document, MAX_DOCUMENT_WORDS), source))

    def examples(self):
        rng = self.rng
        index = collections.defaultdict(list)
        for i, (_, text) in enumerate(self.documents):
            for w in set(content_words(text)):
                index[w].append(i)
        out = []
        counts = {}
        for kind in sorted(self.units):
            units = self.units[kind]
            rng.shuffle(units)
            units = units[:MAX_KEYWORD_UNITS[self.lang] if kind == "keywords"
                          else MAX_UNITS_PER_KIND[kind]]
            counts[kind] = len(units)
            for query, document, source in units:
                negatives = []
                query_words = set(content_words(query))
                if len(query_words) >= 3:
                    word = rng.choice(sorted(query_words))
                    candidates = [i for i in index.get(word, [])
                                  if self.documents[i][0] != source]
                    if candidates:
                        negative = self.documents[rng.choice(candidates)][1]
                        if len(query_words & set(content_words(negative))) < len(query_words):
                            negatives.append(negative)
                while len(negatives) < NEGATIVES_PER_QUERY:
                    other_source, negative = rng.choice(self.documents)
                    if other_source == source:
                        continue
                    if kind == "name" and rng.random() < 0.5:
                        negative = name_document(made_up_name(rng, self.lang), negative, self.lang, rng)
                    negatives.append(negative)
                for negative in negatives:
                    if excluded(negative):
                        continue
                    out.append({"lang": self.lang, "a": query, "b": document, "label": 1})
                    out.append({"lang": self.lang, "a": query, "b": negative, "label": 0})
        for text in self.singles:
            if not excluded(text):
                out.append({"lang": self.lang, "a": text, "label": -1})
        return out, counts


def keyword_query(text, lang, rng):
    """Words of `text` as a search: one to four consecutive words, or two or three words picked in
    order, half the time put in a question template ("how to ...", "... là gì", "... 방법").
    Korean words lose their particle or ending half the time (korean_stem)."""
    words = [w.strip(".,:;()[]\"“”«»") for w in text.split()]
    words = [w for w in words if w]
    if len(words) < 4:
        return None
    if rng.random() < 0.5:
        length = rng.randint(1, min(4, len(words) - 1))
        start = rng.randrange(len(words) - length + 1)
        picked = words[start:start + length]
    else:
        picked = [words[i] for i in sorted(rng.sample(range(len(words)), rng.randint(2, 3)))]
    if lang == "ko" and rng.random() < 0.5:
        picked = [korean_stem(w) for w in picked]
    query = " ".join(picked)
    if not content_words(query):
        return None
    if rng.random() < 0.5:
        query = rng.choice(KEYWORD_TEMPLATES[lang]).format(k=query)
    return query


def cloze(paragraph, rng):
    """(sentence, rest of the paragraph) or None: the sentence is left in the document one time in
    ten, as in inverse-cloze pre-training, so that a verbatim match also counts."""
    sentences = split_sentences(paragraph)
    if len(sentences) < 2:
        return None
    i = rng.randrange(len(sentences))
    if len(sentences[i].split()) < 3:
        return None
    rest = sentences if rng.random() < 0.1 else sentences[:i] + sentences[i + 1:]
    return truncate_words(sentences[i], 20), " ".join(rest)



def add_cloze(builder, paragraph, source, rng):
    """One inverse-cloze unit of `paragraph` (a sentence as query, the rest as document)."""
    pair = cloze(paragraph, rng)
    if pair:
        builder.add_unit("cloze", pair[0], pair[1], source)


def add_keyword_queries(builder, text, source, lang, rng):
    """KEYWORD_QUERIES_PER_TEXT keyword searches for `text`, each with `text` as document."""
    for _ in range(KEYWORD_QUERIES_PER_TEXT[lang]):
        query = keyword_query(text, lang, rng)
        if query:
            builder.add_unit("keywords", query, text, source)

def build(lang, descriptions, catalogue, rng):
    builder = Builder(lang, rng)
    for package, short, paragraphs in descriptions:
        if excluded(short) or not paragraphs:
            continue
        body = " ".join(paragraphs)
        if detect_language(short) != lang and lang != "en":
            continue
        builder.add_document(package, body)
        builder.add_document(package, short)
        builder.add_unit("description", short, body, package)
        if rng.random() < 0.5:
            name = made_up_name(rng, lang)
            document = re.sub(re.escape(package), name, body, flags=re.IGNORECASE)
        else:
            name, document = package, body
        if name.lower() not in document.lower():
            document = name_document(name, document, lang, rng)
        builder.add_unit("name", name_query(name, lang, rng), document, package)
        for paragraph in paragraphs:
            add_cloze(builder, paragraph, package, rng)
        add_keyword_queries(builder, body, package, lang, rng)
        builder.singles.append(truncate_words(body, MAX_DOCUMENT_WORDS))
    for domain, paragraphs in catalogue:
        source = domain + ":" + paragraphs[0][:40]
        for paragraph in paragraphs:
            builder.add_document(source, paragraph)
            add_cloze(builder, paragraph, source, rng)
            add_keyword_queries(builder, paragraph, source, lang, rng)
            if rng.random() < 0.3:
                name = made_up_name(rng, lang)
                builder.add_unit("name", name_query(name, lang, rng),
                                 name_document(name, paragraph, lang, rng), source)
            if len(paragraph.split()) >= 8 and rng.random() < 0.3:
                builder.singles.append(truncate_words(paragraph, MAX_DOCUMENT_WORDS))
    return builder.examples()


def heldout_texts(path):
    texts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            item = json.loads(line)
            texts += [item["relevant"]] + item["unrelated"]
    return [normalise(t).lower() for t in texts]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--translations", required=True,
                        help="folder with Translation-en, Translation-vi, Translation-ko")
    parser.add_argument("--packages", required=True,
                        help="folder the catalogue packages are unpacked into (usr/share/locale)")
    parser.add_argument("--heldout", required=True, help="the general-domain held-out JSONL")
    parser.add_argument("--out", required=True, help="folder for general.jsonl")
    args = parser.parse_args()

    catalogues = read_catalogues(args.packages)
    heldout = heldout_texts(args.heldout)
    rng = random.Random(SEED)
    examples = []
    for lang in LANGUAGES:
        path = os.path.join(args.translations, f"Translation-{lang}")
        descriptions = read_descriptions(path, lang)
        rng.shuffle(descriptions)
        descriptions = sorted(descriptions[:MAX_DESCRIPTIONS[lang]])
        lang_examples, counts = build(lang, descriptions, catalogues[lang], rng)
        examples += lang_examples
        labels = collections.Counter(e["label"] for e in lang_examples)
        print(f"{lang}: {len(descriptions)} descriptions, {len(catalogues[lang])} messages; "
              f"query units {dict(counts)}; examples {labels[1]} relevant + {labels[0]} "
              f"irrelevant + {labels[-1]} masked-LM texts", file=sys.stderr)
    for example in examples:
        for text in (example["a"], example.get("b", "")):
            lower = text.lower()
            for held in heldout:
                if held in lower:
                    sys.exit(f"held-out text in the training data: {held!r} in {text!r}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "general.jsonl"), "w", encoding="utf-8") as f:
        for example in examples:
            f.write(json.dumps(example, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
