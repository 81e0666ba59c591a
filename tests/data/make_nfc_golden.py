#!/usr/bin/env python3
"""Writes nfc_golden.json: Unicode NFC by Python's unicodedata, the reference for unicode::Nfc.

    /usr/bin/python3 tests/data/make_nfc_golden.py   # rewrites tests/data/nfc_golden.json

Cases: every Vietnamese letter decomposed, with its marks in both orders; every Hangul syllable as
conjoining jamo (one long text); blocked marks, singletons and composition exclusions; and seeded
random runs of letters, combining marks and jamo. Only characters assigned in Unicode 14 (Python
3.11's unicodedata) are used, so that a newer utf8proc must give the same answer.
"""
import json
import os
import random
import unicodedata

VIETNAMESE = ("ăâđêôơưàáảãạằắẳẵặầấẩẫậèéẻẽẹềếểễệìíỉĩịòóỏõọồốổỗộờớởỡợùúủũụừứửữựỳýỷỹỵ")


def main():
    cases = []
    letters = VIETNAMESE + VIETNAMESE.upper()
    for letter in letters:
        decomposed = unicodedata.normalize("NFD", letter)
        cases.append(decomposed)
        if len(decomposed) == 3:
            cases.append(decomposed[0] + decomposed[2] + decomposed[1])
    cases.append(unicodedata.normalize("NFD", "Tôi yêu Việt Nam quá"))
    cases.append(unicodedata.normalize("NFD", "나는 오늘 랭체인을 공부한다"))
    cases.append(unicodedata.normalize("NFD", "".join(chr(c) for c in range(0xAC00, 0xD7A4))))
    cases += [
        "a\u0301\u0301",        # the second acute has nothing left to compose with
        "a\u0316\u0301",        # a lower class mark between does not block
        "a\u0301\u0316",        # reordered first
        "\u1100\u0301\u1161",   # a mark between jamo blocks them
        "\u1100\u1161\u11a8",   # L V T
        "\uac00\u11a8",         # LV syllable + T
        "\u212b",               # ANGSTROM SIGN: singleton decomposition to A + ring
        "\u0958",               # composition exclusion: stays decomposed
        "\u0344",               # COMBINING GREEK DIALYTIKA TONOS: two marks
        "\u0301a",              # a mark with no starter before it
        "e\u0302\u0323",        # marks in non-canonical order
        "\u00e9\u0323",         # precomposed then a lower mark: recomposed in order
        "",
    ]
    rng = random.Random(20261202)
    pool = ("aeiouyAEOUncgCGsSwz" + "\u0300\u0301\u0302\u0303\u0306\u0309\u031b\u0323\u0308"
            "\u0327\u0316\u0330" + "\u1100\u1102\u1109\u110b\u1161\u1165\u1169\u1175\u11a8\u11ab"
            "\u11af\u11b7" + "\uac00\ub098\uc5b4 ")
    for _ in range(2000):
        cases.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 7))))
    golden = {
        "unidata_version": unicodedata.unidata_version,
        "cases": [{"input": text, "nfc": unicodedata.normalize("NFC", text)} for text in cases],
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nfc_golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases -> {path}")


if __name__ == "__main__":
    main()
