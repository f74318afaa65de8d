"""A model's chat template rendered as transformers renders one, sandboxed."""

from __future__ import annotations

import pytest

from chatfmt.template import ChatTemplate, TemplateError


def test_a_template_gets_what_transformers_passes_it() -> None:
    source = (
        "{{ bos_token }}{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "[{{ m.role }}]{{ m.content }}\n{% endfor %}{{ tools | tojson }}{{ eos_token }}"
        "{% if add_generation_prompt %}[assistant]{% endif %}{{ flag }}"
    )
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    messages = [{"role": "user", "content": "é"}, {"role": "user", "content": "b"}, {}]
    text = template.render(messages, tools=[{"name": "北京"}], flag="!")
    # trim_blocks, loop controls, a tojson that keeps non-ASCII, the special tokens, kwargs.
    assert text == '<s>[user]é\n[user]b\n[{"name": "北京"}]</s>[assistant]!'
    assert template.render(messages[:1], add_generation_prompt=False) == "<s>[user]é\nnull</s>"


def test_raise_exception_and_broken_templates_are_template_errors() -> None:
    refusing = ChatTemplate("{{ raise_exception('roles must alternate') }}")
    with pytest.raises(TemplateError, match="roles must alternate"):
        refusing.render([])
    with pytest.raises(TemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")
    failing = ChatTemplate("{{ messages[3].content }}")
    with pytest.raises(TemplateError, match="the chat template failed"):
        failing.render([{"role": "user", "content": "x"}])


def test_a_template_cannot_reach_python() -> None:
    escape = ChatTemplate("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError, match="SecurityError"):
        escape.render([])


def test_a_template_that_builds_a_list_renders_in_the_mutable_sandbox() -> None:
    # Kimi K2's templates append to lists they make; transformers' immutable sandbox refuses.
    source = (
        "{% set seen = [] %}{% for m in messages %}{{ seen.append(m.role) or '' }}{% endfor %}"
        "{{ seen | join(',') }}"
    )
    template = ChatTemplate(source)
    assert template.render([{"role": "user"}, {"role": "assistant"}]) == "user,assistant"
