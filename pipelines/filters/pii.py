"""PII formatting: e-mail and IP addresses replaced, as datatrove's PIIFormatter (off by default).

This block never drops a document; it rewrites it. An e-mail address (``local@domain.tld``, or
an address literal ``local@[1.2.3.4]``) becomes one of ``email_replacement``; a dotted IPv4
address becomes one of ``ip_replacement`` when it is public (``ipaddress``'s ``is_global``;
``only_remove_public_ips=false`` replaces private and reserved ones too). The replacements are
used in turn, starting again with the first in each document, so a document's output does not
depend on which batch it was in (datatrove's cycle runs on across documents).
Enable it by adding ``"pii"`` to ``filter.blocks``, usually last.
"""
from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from pipelines.filters.block import Doc, Verdict
from pipelines.filters.registry import register


@dataclass
class PiiConfig:
    # datatrove's PIIFormatter: e-mail addresses and (public) IP addresses replaced, never dropped.
    remove_emails: bool = True
    remove_ips: bool = True
    only_remove_public_ips: bool = True
    email_replacement: list[str] = field(
        default_factory=lambda: ["email@example.com", "firstname.lastname@example.org"])
    ip_replacement: list[str] = field(default_factory=lambda: ["22.214.171.124", "126.96.36.199", "188.8.131.52",
                                                              "184.108.40.206", "220.127.116.11", "18.104.22.168"])


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\d.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\d]|\.\d)")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_EMAIL = re.compile(
    r"\b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    rf"@(?:(?:{_LABEL}\.)+{_LABEL}|\[{_OCTET}(?:\.{_OCTET}){{3}}\])")


class Pii:
    name = "pii"

    def __init__(self, cfg: PiiConfig):
        self.cfg = cfg

    def _replace(self, pattern: re.Pattern, text: str, replacements: list[str], valid) -> str:
        turn = 0

        def sub(m: re.Match) -> str:
            nonlocal turn
            if not valid(m.group(0)):
                return m.group(0)
            out = replacements[turn % len(replacements)]
            turn += 1
            return out

        return pattern.sub(sub, text)

    def _ip_ok(self, s: str) -> bool:
        try:
            ip = ipaddress.ip_address(s)
        except ValueError:
            return False
        return ip.is_global or not self.cfg.only_remove_public_ips

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg, text = self.cfg, doc.text
        if cfg.remove_emails and cfg.email_replacement and "@" in text:
            text = self._replace(_EMAIL, text, cfg.email_replacement, lambda s: True)
        if cfg.remove_ips and cfg.ip_replacement and "." in text:
            text = self._replace(_IPV4, text, cfg.ip_replacement, self._ip_ok)
        if text != doc.text:
            doc.set_text(text)
        return None


@register("pii", config=PiiConfig, position=80, default=False)
def build(cfg: PiiConfig) -> Pii:
    return Pii(cfg)
