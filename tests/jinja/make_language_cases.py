#!/usr/bin/env python3
"""Writes data/language_cases.json: small templates over the whole language
subset (make_expected.py renders each with jinja2 into language_expected.json)."""
import json
import os

C = {"s": "Hello World", "n": 7, "f": 2.5, "l": [3, 1, 2], "d": {"b": 2, "a": 1},
     "u": "héllo", "none": None, "t": True, "msgs": [{"role": "user", "content": "hi"},
     {"role": "assistant", "content": "yo", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}],
     "words": ["b", "A", "c", "a"], "big": 10**16, "neg": -3, "e": ""}

T = r"""{{ 1 }}|{{ 1.0 }}|{{ 1.5e3 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 0.1 + 0.2 }}|{{ 10 / 4 }}|{{ 10 // 4 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 2 ** 10 }}|{{ 7 % -3 }}
{{ none }}|{{ true }}|{{ False }}|{{ l }}|{{ d }}|{{ (1, 'a') }}|{{ (1,) }}|{{ ['it\'s', "q\"", 'n\n'] }}|{{ {'k': none, 'f': 1.0} }}
{{ s.upper() }}|{{ s.lower() }}|{{ s.title() }}|{{ 'hello world'.capitalize() }}|{{ s.startswith('Hell') }}|{{ s.endswith(('x', 'ld')) }}|{{ s.find('o') }}|{{ s.rfind('o') }}|{{ s.count('l') }}
{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  a'.lstrip() }}|{{ 'a  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ 'l1\nl2\r\nl3'.splitlines() }}
{{ s.replace('o', '0') }}|{{ s.replace('o', '0', 1) }}|{{ ', '.join(['a', 'b']) }}|{{ u|length }}|{{ u[1] }}|{{ u[1:3] }}|{{ u[::-1] }}|{{ l[-1] }}|{{ l[1:] }}|{{ l[:-1] }}|{{ l[::2] }}|{{ l[5] }}|{{ s[0:100] }}
{{ d.get('a') }}|{{ d.get('z') }}|{{ d.get('z', 'dflt') }}|{{ d.items() | list }}|{{ d.keys() | list }}|{{ d.values() | list }}|{{ d['a'] }}|{{ d.a }}|{{ d.zz }}|{{ d.zz is defined }}
{{ l|length }}|{{ l|count }}|{{ l|first }}|{{ l|last }}|{{ l|join('-') }}|{{ l|sort }}|{{ l|sort(reverse=true) }}|{{ words|sort }}|{{ words|sort(case_sensitive=true) }}|{{ words|unique|list }}|{{ l|reverse|list }}|{{ l|sum }}|{{ l|min }}|{{ l|max }}
{{ s|upper }}|{{ s|lower }}|{{ 'hello world'|title }}|{{ 'hELLO'|capitalize }}|{{ '  x  '|trim }}|{{ 'xax'|trim('x') }}|{{ s|replace('l', 'L') }}|{{ missing|default('dflt') }}|{{ e|default('dflt') }}|{{ e|default('dflt', true) }}|{{ none|d('x', true) }}
{{ d|items|list }}|{{ d|dictsort }}|{{ d|dictsort(by='value', reverse=true) }}|{{ d|list }}|{{ s|list }}|{{ n|string }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ '2.5'|float }}|{{ 3|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 3.7|int }}
{{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, first=true) }}|{{ 'a\n\nb'|indent(2, blank=true) }}|{{ 'one two  three'|wordcount }}|{{ 'ab'|center(6) }}|{{ msgs|map(attribute='role')|list }}|{{ ['a','b']|map('upper')|join }}|{{ msgs|selectattr('role', 'equalto', 'user')|list|length }}
{{ msgs|rejectattr('role', 'eq', 'user')|map(attribute='content')|first }}|{{ l|select('odd')|list }}|{{ l|reject('odd')|list }}|{{ [0, 1, '', 'x', none]|select|list }}|{{ msgs|selectattr('tool_calls')|list|length }}|{{ msgs|selectattr('tool_calls', 'defined')|list|length }}
{{ d|tojson }}|{{ l|tojson }}|{{ msgs|tojson }}|{{ msgs[1]|tojson(indent=2) }}|{{ {'u': u, 'q': '"\\\n\t\u0001'}|tojson }}|{{ [1.0, 1e20, none, true]|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ {}|tojson }}|{{ []|tojson(indent=2) }}
{{ n is odd }}|{{ n is even }}|{{ n is divisibleby 7 }}|{{ n is divisibleby(3) }}|{{ s is string }}|{{ n is number }}|{{ n is integer }}|{{ f is float }}|{{ d is mapping }}|{{ l is iterable }}|{{ l is sequence }}|{{ s is sequence }}|{{ t is boolean }}|{{ t is true }}|{{ t is false }}
{{ none is none }}|{{ n is not none }}|{{ x is defined }}|{{ x is undefined }}|{{ n is eq 7 }}|{{ n is equalto(7) }}|{{ n is ne 7 }}|{{ n is gt 3 }}|{{ n is lt 3 }}|{{ 'a' is in 'cat' }}|{{ 2 is in l }}|{{ 'ab' is lower }}|{{ 'AB' is upper }}|{{ range is callable }}
{{ 1 in l }}|{{ 9 not in l }}|{{ 'a' in d }}|{{ 'ell' in s }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}|{{ [1, 2] < [1, 3] }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ n >= 7 }}|{{ n != 7 }}|{{ not n }}|{{ not none }}|{{ n and s }}|{{ e or 'fallback' }}|{{ none or e }}
{{ 'a' ~ 1 ~ none ~ x }}|{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ l + [4] }}|{{ 'a' + 'b' }}|{{ -n }}|{{ +n }}|{{ - -n }}|{{ 1 if t else 2 }}|{{ 1 if none else 2 }}|{{ 'yes' if none }}|{{ n|string + 'x' }}|{{ ('a' ~ 'b')|upper }}|{{ -2 ** 2 }}|{{ 2 * 3 + 4 }}|{{ 2 + 3 * 4 }}|{{ (2 + 3) * 4 }}
{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}
{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in l if x > 1 %}{{ x }}{{ loop.index }}{{ loop.length }}{% endfor %}|{% for c in 'ab' %}{{ c }}.{% endfor %}
{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}|{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for x in missing %}never{% endfor %}|{% for i in range(3) %}{{ i }}{% endfor %}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}
{% set x = 5 %}{{ x }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% for i in l %}{% set x = i %}{% endfor %}{{ x }}|{% set ns = namespace(total=0, found=false) %}{% for i in l %}{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }}{{ ns.found }}
{% set block %}  inner {{ n }} {% endset %}[{{ block }}]|{% set up | upper %}shout{% endset %}{{ up }}|{% filter upper %}filtered {{ s }}{% endfilter %}|{% generation %}gen{% endgeneration %}
{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet(name='Cy', punct='?') }}|{{ greet('Di', punct='.') }}
{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %}{{ rec(3) }}|{% macro va() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ va(1, 2, z=3) }}
{% if n > 10 %}big{% elif n > 5 %}medium{% else %}small{% endif %}|{% if x %}x{% endif %}|{% if not x %}notx{% endif %}|{% if l %}nonempty{% endif %}|{% if e %}e{% else %}noe{% endif %}|{% if d.a == 1 and d.b == 2 %}both{% endif %}
{{ msgs[0]['content'] }}|{{ msgs[0].content }}|{{ msgs[1].tool_calls[0].function.arguments.x }}|{{ msgs[1]['tool_calls'][0]['function']['name'] }}|{{ msgs[1].tool_calls[0].function.arguments|tojson }}|{{ msgs|length }}|{{ msgs[-1].role }}
{{ strftime_now('%Y-%m-%d %H:%M:%S %d %b %Y') }}|{{ big }}|{{ neg }}|{{ f * 2 }}|{{ n / 7 }}|{{ 1e300 * 1e10 }}|{{ 0.000123 }}|{{ 123456789.123 }}|{{ 1/3 }}|{{ 100.0 }}|{{ 1e15 }}|{{ 12345678901234567.0 }}
"""

WS = [
    "a\n{% if t %}\n  yes\n{% endif %}\nb\n",
    "  {% if t %}x{% endif %}  \n",
    "a  {%- if t -%}  x  {%- endif -%}  b",
    "{{- '  x  ' -}}\n\n  y",
    "line1\n    {% for i in l %}\n    {{ i }}\n    {% endfor %}\nend",
    "{# comment #}\nafter\n  {# indented comment #}\nz",
    "a {{ n }} \n{{ n }}\n",
    "{%+ if t %}  kept{% endif %}",
    "x\n  {%+ if t %}y{% endif +%}\nz",
    "trailing newline\n",
    "two trailing\n\n",
    "crlf\r\nline\r\n",
    "{% if t %}\n\n{% endif %}",
    "{%- if t %}\n  a\n{%- endif %}\n",
    "{{ 'a' }}\n{{ 'b' }}\n",
    "text {% raw_not %}",
]

ERR = [
    "{{ x.y }}", "{{ none.y }}", "{{ none.y.z }}", "{{ l.append(1) }}", "{{ d.pop('a') }}", "{{ 'a' + 1 }}",
    "{{ 1 + 'a' }}", "{{ 'a' < 1 }}", "{{ x + 1 }}", "{{ none|length }}", "{{ 1 in none }}", "{{ x|tojson }}",
    "{{ raise_exception('custom: ' ~ n) }}", "{{ n|nosuchfilter }}", "{{ n is nosuchtest }}", "{{ 1 / 0 }}",
    "{{ 1 // 0 }}", "{{ x() }}", "{{ n() }}", "{{ msgs|map(attribute='role')|tojson }}", "{{ (msgs|map(attribute='role'))[0] }}",
    "{% for a, b in l %}{% endfor %}", "{{ range(200000)|length }}", "{% set l.x = 1 %}", "{{ d|items|tojson }}",
    "{{ 'abc'[1.0] }}", "{% extends 'x' %}", "{% include 'x' %}", "{{ 'a' % 1 }}",
    "{% if t %}unclosed", "{{ 'a'.split('') }}", "{{ [1,2]|map('upper')|list }}",
]

cases = [{"template": line, "context": C} for line in T.strip("\n").split("\n")]
cases += [{"template": t, "context": C} for t in WS]
cases += [{"template": t, "context": C} for t in ERR]
# scoping, as jinja2 compiles it
SCOPES = [
    "{% for i in [1,2] %}{% if i == 2 %}[{{ y }}]{% endif %}{% set y = i %}{% endfor %}",
    "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% set x = 1 %}{% if true %}{% set x = 3 %}{% endif %}{{ x }}",
    "{% macro m() %}{{ g }}{% endmacro %}{% set g = 5 %}{{ m() }}",
    "{% set x = 1 %}{% macro m() %}{% set x = 2 %}{{ x }}{% endmacro %}{{ m() }}{{ x }}",
    "{% for a in [1,2] %}{% for b in [3] %}{{ loop.index }}{{ a }}{% endfor %}{{ loop.index }}{% endfor %}",
    "{% macro outer(x) %}<{{ inner(x) }}>{% endmacro %}{% macro inner(y) %}{{ y * 2 }}{% endmacro %}{{ outer(3) }}",
    "{% macro m(a, b) %}{{ a }}|{{ b }}|{{ b is defined }}{% endmacro %}{{ m(1) }}",
    "{% for x in l %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}",
    "{% set items = [] %}{% for m in msgs if m.role == 'user' %}{{ m.content }}{{ loop.last }}{% endfor %}",
    "{% for m in msgs %}{% set content = m.content %}{% if loop.first %}{% set content = 'F:' + content %}{% endif %}{{ content }};{% endfor %}",
    "{% set ns = namespace(a=1) %}{% set ns.b = 2 %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}{{ ns['a'] }}",
    "{{ [1,2]|string }}{{ none|string }}{{ 1.0|string }}{{ (1,)|tojson }}{{ ('a', 'b')|join }}",
    "{{ d|join(',') }}|{{ 'abc'|first }}|{{ 'abc'|last }}|{{ 'abc'|list }}|{{ none|default('x') }}|{{ x|default(none) }}",
    "{{ words|unique|list }}|{{ words|unique(case_sensitive=true)|list }}|{{ msgs|sort(attribute='role')|map(attribute='role')|join }}",
    "{{ ['3', '1']|map('int')|list }}|{{ l|select('equalto', 2)|list }}|{{ l|select('gt', 1)|list }}|{{ {'B': 1, 'a': 2}|dictsort }}",
    "{{ 'a' 'b' }}|{{ \"%s\" }}|{{ -7.5 // 2 }}|{{ -7.5 % 2 }}|{{ 2 ** -1 }}|{{ 7 / 7 }}|{{ 0.1 * 3 }}|{{ 1e16|tojson }}|{{ 3.0|int }}",
    "{{ l|map('string')|join(', ') }}|{{ msgs|map(attribute='missing')|list }}|{{ msgs|map(attribute='missing', default='?')|list }}",
    "{{ msgs[0] }}|{{ msgs[0].items()|list }}|{{ d.items() }}",
    "{{ 'x' if t }}|{{ 'x' if none }}|{{ ('x' if none) is defined }}|{{ (l|selectattr('x')|list) }}|{{ l|reject|list }}",
    "{% if msgs|selectattr('role', 'equalto', 'nobody') %}generator is true{% endif %}|{% if msgs|selectattr('role', 'equalto', 'nobody')|list %}list{% else %}empty{% endif %}",
    "{{ s[1:-1] }}|{{ s[-3:] }}|{{ s[:0] }}|{{ s[::3] }}|{{ l[10:] }}|{{ l[-10:1] }}|{{ s[3:1:-1] }}|{{ (1, 2, 3)[1:] }}",
    "{{ 'a-b-c'.split('-', -1) }}|{{ 'a'.join('xyz') }}|{{ 'Hello'.startswith('') }}|{{ ' x '.strip(' x') }}|{{ 'aXbX'.rsplit('X') }}",
    "{{ 'hello world foo'.title() }}|{{ \"they're bill's\".title() }}|{{ 'ABC def'.capitalize() }}|{{ 'x1y2'.upper() }}|{{ 'a_b c'|title }}",
    "{{ s|center(15) }}|{{ s|center(16) }}|{{ 'abc'|center(8) }}|{{ 'a'|indent(4, true) }}|{{ ''|indent(2, true) }}",
    "{{ {'a': {'b': [1, {'c': none}]}}|tojson(indent=1) }}",
    "{{ 1 == 1 == 1 }}|{{ 1 < 2 > 1 }}|{{ 'b' in ['a', 'b'] }}|{{ ('a', 1) in [('a', 1)] }}|{{ [1] == [1] }}|{{ {'a': 1} == {'a': 1} }}|{{ none == none }}|{{ x == x }}",
    "{{ true and 'yes' }}|{{ 0 or none }}|{{ [] or 'empty' }}|{{ not '' }}|{{ 1 if 0 else 'else' }}|{{ none is none and t is true }}",
    "{{ x|length }}|{{ x|list }}|{{ x|join }}|{{ x|upper }}|{{ x|trim }}|{{ x|first is defined }}|{{ x is iterable }}|{{ x is sequence }}",
]
SCOPES += [
    "{{ {'u': u, 'e': '😀\\n\\u0001', 'k': ['ü']}|tojson(ensure_ascii=true) }}|{{ u|tojson(true) }}|{{ u|tojson(false, 2) }}",
    "{% for x in l %}{{ loop.cycle('odd', 'even') }}{% endfor %}|{{ '<a&b>'|e }}|{{ '<a>'|escape|length }}|{{ ('<b>'|safe)|e }}",
]
cases += [{"template": t, "context": C} for t in SCOPES]
# tojson through Markup, messages with non-ASCII, None content
cases += [
    {"template": "{{ 'a'|safe + '<b>' }}|{{ '<b>' + 'a'|safe }}|{{ ('<i>'|safe + '&')|length }}|{{ '\"'|safe ~ '<' }}", "context": {}},
    {"template": "{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls is defined %}{{ m.tool_calls|tojson }}{% endif %};{% endfor %}",
     "context": {"messages": [{"role": "user", "content": "ünïcode ✓ 😀"}, {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}]}},
]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "language_cases.json"), "w") as f:
    json.dump(cases, f, indent=1, ensure_ascii=False)
    f.write("\n")
print(len(cases))
