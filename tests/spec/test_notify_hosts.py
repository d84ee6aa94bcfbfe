"""A webhook's host: only letters, digits, dots and hyphens (after IDNA), or a bracketed IPv6."""

from __future__ import annotations

import pytest

from grace.spec.job import JobSpec
from grace.spec.notify import host_allowed, url_host

BAD = ["https://evil.com\\\\.example.com/x", "https://evil.com;.example.com/x",
       "https://evil.com%40x.example.com/x", "https://evil.com\\u00a0.example.com/x",
       "https://evil.com_x.example.com/x", "https://evil..example.com/x"]


@pytest.mark.parametrize("url", BAD)
def test_a_host_with_other_characters_is_refused_at_submit_and_never_allowed(url: str) -> None:
    url = url.encode().decode("unicode_escape")
    assert not host_allowed(url, ["*.example.com", "example.com"])
    with pytest.raises(ValueError, match=r"notify\.webhook") as e:
        JobSpec.model_validate({"name": "j", "gpus": 1, "notify": {"webhook": url}})
    assert "letters, digits, dots and hyphens" in str(e.value)


def test_unicode_names_are_idna_encoded_and_ipv6_literals_stay_allowed() -> None:
    assert url_host("https://Bücher.example.com./x") == "xn--bcher-kva.example.com"
    assert host_allowed("https://bücher.example.com/x", ["*.example.com"])
    assert host_allowed("http://[::1]:9000/", ["[::1]:9000"])
    JobSpec.model_validate({"name": "j", "gpus": 1, "notify": {"webhook": "http://[::1]:9000/"}})
