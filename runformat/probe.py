"""The hostile-text probe's classes (``--probe-texts``): what each is and its texts, and the text
ids that name them in requests.jsonl (``probe:CLASS:N``), shared by the load generator that sends
them and the dashboard that reports them."""

from __future__ import annotations

_SENTENCE = "The quarterly report shows steady growth across every region, and the team thanks you. "
#: Class name -> (what it is, its texts). A text holding a lone surrogate (``\udce9``) is sent as
#: the raw byte it escapes (0xE9, not UTF-8; :func:`locustfiles.inputs.bodies.payload`).
CLASSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "empty": ("no text at all", ("",)),
    "whitespace": ("spaces, a tab and a newline only", ("   ", " \t\n ")),
    "one-char": ("a single character", ("a", "?", "。")),
    "long": ("about 6,000 characters, beyond the usual 4,096-character limit", ((_SENTENCE * 70).strip(),)),
    "emoji": ("emoji and symbols", ("Great job 🎉🎉 see you at 5 🙂", "🎉🎉🎉", "© ® ™ ± ≠ → ∞ § ¶ ★")),
    "mixed-script": (
        "Chinese with English words, and three scripts in one sentence",
        ("我们明天下午三点在 Zoom 上开个 meeting 吧。", "Das ist cool, n'est-ce pas? Да, конечно!"),
    ),
    "numbers": (
        "numbers, dates, times, money and units",
        (
            "Call 555-0142 on 2026-12-02 at 14:30; the total is $1,234.56 (3.5% off).",
            "Flight LH401 leaves 07:05 from gate B12; 1/2 of 10^6 is 5e5, and it is -3.5°C.",
        ),
    ),
    "ssml": (
        "SSML-like tags and markup characters",
        ('<speak>Hello <break time="500ms"/> world</speak>', 'Say <emphasis>this</emphasis> & "that" <3 >_<'),
    ),
    "invalid-utf8": (
        "a byte that is not UTF-8 inside the text (HTTP JSON bodies only)",
        ("caf\udce9 au lait, s'il vous pla\udceet.",),
    ),
}
BYTES_ONLY = ("invalid-utf8",)


def class_of(text_id: str) -> str | None:
    """The probe class of a record's ``text_id``, or None for a corpus text."""
    parts = text_id.split(":") if isinstance(text_id, str) else ()
    return parts[1] if len(parts) == 3 and parts[0] == "probe" and parts[1] in CLASSES else None
