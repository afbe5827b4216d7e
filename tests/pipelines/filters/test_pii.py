"""PII block: e-mail and public IP addresses replaced in turn; nothing dropped."""
from __future__ import annotations

from pipelines.filters import Doc, run_blocks
from tests.pipelines.filters._docs import block


def run(text: str, **section) -> str:
    doc = Doc(text)
    assert run_blocks(doc, [block("pii", **section)]) is None
    return doc.text


def test_emails_and_public_ips_are_replaced_in_turn():
    text = "Write to jane.doe@mail.example.net or bob+x@host.co.uk; servers 8.8.8.8 and 1.1.1.1 answer."
    assert run(text) == ("Write to email@example.com or firstname.lastname@example.org; servers "
                         "22.214.171.124 and 126.96.36.199 answer.")


def test_private_ips_kept_unless_asked():
    text = "The router is at 192.168.1.1 and the loopback at 127.0.0.1."
    assert run(text) == text
    assert run(text, only_remove_public_ips=False) == ("The router is at 22.214.171.124 and the loopback at "
                                                       "126.96.36.199.")


def test_not_addresses_are_left_alone():
    text = "Version 1.2.3.4.5 costs 3.50 and 999.1.1.1 is not an address; meet me @home."
    assert run(text) == text


def test_switches():
    text = "Mail a@b.org from 8.8.8.8."
    assert run(text, remove_emails=False) == "Mail a@b.org from 22.214.171.124."
    assert run(text, remove_ips=False) == "Mail email@example.com from 8.8.8.8."


def test_same_output_whatever_came_before():
    b = block("pii")
    first, second = Doc("x a@b.org"), Doc("y c@d.org")
    run_blocks(first, [b]), run_blocks(second, [b])
    assert second.text == "y email@example.com"  # the turn restarts with every document
