"""The attributes and topics a statement may name, and the key its card gets.

A known attribute (`response_language`, `editor`, `occupation` …) when the statement
names one, else its subject words (`pref_dark_mode`, `pref_深色主题`); `ALIASES` are the
keys an LLM run may have used for the same attribute, reused so a change replaces the card.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from facts.enums import Category
from facts.judging.rules_extractor.text import has_han
from facts.judging.schemas import normalize_key
from facts.judging.wording import key_mismatch

_I = re.IGNORECASE

# Attributes a statement may name, most specific first. A changed value of the same
# attribute replaces the card; these also make keys agree across both languages.
LANGS = (
    r"\b(?:english|chinese|mandarin|cantonese|japanese|korean|french|german|spanish|russian|portuguese|"
    r"italian)\b|中文|英文|英语|汉语|普通话|粤语|日语|日文|韩语|法语|德语|西班牙语|俄语|简体|繁体"
)
PREFERENCE_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern, _I))
    for key, pattern in (
        # bounded gaps: an unbounded .* is quadratic on a long run of "comment comment …"
        (
            "code_comment_language",
            rf"(?:注释|comments?\b).{{0,80}}?(?:{LANGS})|(?:{LANGS}).{{0,80}}?(?:注释|comments?\b)",
        ),
        (
            "commit_message_language",
            rf"(?:commit|提交信息|提交说明).{{0,80}}?(?:{LANGS})|(?:{LANGS}).{{0,80}}?(?:commit|提交信息)",
        ),
        ("response_language", LANGS),
        ("indentation", r"\btabs?\b|\bspaces\b|缩进|制表符"),
        ("type_hints", r"type hints?|type annotations?|类型注解|类型提示|类型标注"),
        ("emoji_usage", r"\bemojis?\b|表情符号|表情包|表情"),
        ("units", r"\b(?:metric|imperial|celsius|fahrenheit)\b|公制|英制|摄氏|华氏"),
        ("clarifying_questions", r"ask (?:me )?(?:first|before)|clarifying|先问我|先确认|问清楚"),
        ("code_examples", r"\bexamples?\b|示例|例子|样例|sample code|\bsnippets?\b|\bdemo\b"),
        (
            "response_length",
            r"\b(?:concise|brief|short|shorter|succinct|terse|long|longer|lengthy|detailed|verbose|in-depth|"
            r"thorough|wordy|to the point)\b|简洁|简短|简单点|简明|精简|详细|啰嗦|冗长|长篇|短一点|短一些|"
            r"展开讲|言简意赅|废话",
        ),
        (
            "response_format",
            r"\bmarkdown\b|bullet(?:ed)? (?:points|lists?)|\btables?\b|表格|列表|分点|要点|headings?|代码块|"
            r"code blocks?",
        ),
        (
            "explanation_style",
            r"step[- ]by[- ]step|analog(?:y|ies)|first principles|一步一步|循序渐进|类比|原理|通俗|白话|深入浅出",
        ),
        (
            "tone",
            r"\b(?:formal|informal|casual|friendly|polite|blunt|humou?r|jokes?|sarcas\w*)\b|正式|随意|口语化|"
            r"幽默|委婉|客气|语气",
        ),
    )
)
TOOL_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern, _I))
    for key, pattern in (
        ("editor", r"\b(?:vim|neovim|nvim|emacs|vs ?code|visual studio code|sublime|intellij|pycharm|goland|"
         r"webstorm|jetbrains|cursor|zed|helix)\b|编辑器"),
        ("operating_system", r"\b(?:linux|ubuntu|debian|fedora|arch linux|macos|mac os|mac|windows|wsl)\b|操作系统"),
        ("shell", r"\b(?:bash|zsh|fish|powershell)\b"),
        ("package_manager", r"\b(?:poetry|uv|pipenv|conda|npm|pnpm|yarn|bun)\b"),
        ("test_framework", r"\b(?:pytest|unittest|jest|vitest|mocha|junit)\b"),
        ("git_workflow", r"\b(?:rebase|squash|merge commits?|trunk-based|gitflow)\b|变基|压缩提交"),
        ("programming_language", r"\b(?:python|java|golang|go|rust|typescript|javascript|ruby|php|kotlin|swift|"
         r"scala|elixir|haskell|c\+\+|c#|clojure|ocaml|julia|lua|perl|dart|zig)\b"),
    )
)  # fmt: skip
ROLE_WORDS = re.compile(
    r"\b(?:engineer|developer|dev|programmer|coder|scientist|student|teacher|designer|manager|analyst|researcher|"
    r"architect|consultant|lead|founder|co-founder|admin|administrator|sysadmin|writer|doctor|nurse|lawyer|"
    r"accountant|professor|lecturer|intern|freelancer|maintainer|contractor|tester|sre|devops|pm|cto|ceo|vp|"
    r"director|editor|translator|journalist|artist|musician|product owner|owner|beginner|newbie|novice|hobbyist|"
    r"phd|postdoc|undergrad|undergraduate|graduate|grad student|chef|pharmacist|therapist|mechanic|"
    r"electrician|entrepreneur|specialist|expert|hacker|gamer|trader|investor|economist|statistician|"
    r"mathematician|physicist|chemist|biologist|marketer|recruiter|librarian|photographer)s?\b",
    _I,
)
ZH_ROLE_WORDS = re.compile(
    r"工程师|开发者|开发人员|开发|程序员|码农|学生|老师|教师|讲师|教授|设计师|产品经理|经理|研究员|博士|硕士|"
    r"研究生|本科生|大学生|高中生|医生|护士|律师|会计|分析师|架构师|运维|测试|创业者|自由职业|作家|编辑|"
    r"科学家|专家|新手|初学者|小白|负责人|主管|总监|实习生|站长|博主|运营|销售|翻译|数据科学家|算法|前端|"
    r"后端|全栈|DBA|产品|店主|老板|医师|药剂师|记者|摄影师|厨师"
)
ATTRIBUTES: dict[str, tuple[str, str]] = {
    # what the user calls it → (key, category)
    "name": ("name", Category.CONTEXT),
    "full name": ("name", Category.CONTEXT),
    "nickname": ("preferred_name", Category.PREFERENCE),
    "job": ("occupation", Category.CONTEXT),
    "role": ("occupation", Category.CONTEXT),
    "job title": ("occupation", Category.CONTEXT),
    "title": ("occupation", Category.CONTEXT),
    "occupation": ("occupation", Category.CONTEXT),
    "profession": ("occupation", Category.CONTEXT),
    "timezone": ("timezone", Category.CONTEXT),
    "time zone": ("timezone", Category.CONTEXT),
    "native language": ("native_language", Category.CONTEXT),
    "first language": ("native_language", Category.CONTEXT),
    "mother tongue": ("native_language", Category.CONTEXT),
    "stack": ("tech_stack", Category.CONTEXT),
    "tech stack": ("tech_stack", Category.CONTEXT),
    "main language": ("programming_language", Category.CONTEXT),
    "primary language": ("programming_language", Category.CONTEXT),
    "company": ("employer", Category.CONTEXT),
    "employer": ("employer", Category.CONTEXT),
    "team": ("team", Category.CONTEXT),
    "major": ("major", Category.CONTEXT),
    "field": ("field", Category.CONTEXT),
    "specialty": ("field", Category.CONTEXT),
    "speciality": ("field", Category.CONTEXT),
    "background": ("background", Category.CONTEXT),
    "pronouns": ("pronouns", Category.CONTEXT),
    "location": ("location", Category.CONTEXT),
    "city": ("location", Category.CONTEXT),
    "hometown": ("hometown", Category.CONTEXT),
    "os": ("operating_system", Category.CONTEXT),
    "operating system": ("operating_system", Category.CONTEXT),
    "editor": ("editor", Category.CONTEXT),
    "ide": ("editor", Category.CONTEXT),
    "shell": ("shell", Category.CONTEXT),
    "birthday": ("birthday", Category.CONTEXT),
    "goal": ("long_term_goal", Category.GOAL),
    "main goal": ("long_term_goal", Category.GOAL),
    "long-term goal": ("long_term_goal", Category.GOAL),
    "long term goal": ("long_term_goal", Category.GOAL),
    "dream": ("long_term_goal", Category.GOAL),
    # Chinese
    "名字": ("name", Category.CONTEXT),
    "姓名": ("name", Category.CONTEXT),
    "昵称": ("preferred_name", Category.PREFERENCE),
    "母语": ("native_language", Category.CONTEXT),
    "时区": ("timezone", Category.CONTEXT),
    "专业": ("major", Category.CONTEXT),
    "职业": ("occupation", Category.CONTEXT),
    "工作": ("occupation", Category.CONTEXT),
    "岗位": ("occupation", Category.CONTEXT),
    "职位": ("occupation", Category.CONTEXT),
    "技术栈": ("tech_stack", Category.CONTEXT),
    "主力语言": ("programming_language", Category.CONTEXT),
    "主要语言": ("programming_language", Category.CONTEXT),
    "主要编程语言": ("programming_language", Category.CONTEXT),
    "编辑器": ("editor", Category.CONTEXT),
    "操作系统": ("operating_system", Category.CONTEXT),
    "系统": ("operating_system", Category.CONTEXT),
    "生日": ("birthday", Category.CONTEXT),
    "目标": ("long_term_goal", Category.GOAL),
    "长期目标": ("long_term_goal", Category.GOAL),
    "梦想": ("long_term_goal", Category.GOAL),
    "城市": ("location", Category.CONTEXT),
    "所在地": ("location", Category.CONTEXT),
    "老家": ("hometown", Category.CONTEXT),
    "公司": ("employer", Category.CONTEXT),
    "团队": ("team", Category.CONTEXT),
    "研究方向": ("field", Category.CONTEXT),
    "方向": ("field", Category.CONTEXT),
}
# Keys an LLM run may have stored for the same attribute: reused when live, so switching
# extractors still replaces instead of duplicating.
ALIASES: dict[str, tuple[str, ...]] = {
    "response_language": ("preferred_language", "language_preference", "answer_language", "reply_language"),
    "response_length": ("answer_length", "verbosity", "response_style"),
    "primary_work": ("work_context", "primary_stack", "work_focus"),
    "occupation": ("job", "role", "job_title", "profession"),
    "preferred_name": ("nickname", "name_preference"),
}

_EN_STOP = frozenset(
    "a an the to of in on for with and or my your their it its is be are am you me them they that this these "
    "those when very really more most some any please always never just i i'm im we our us do does don't dont "
    "not no than over rather instead like prefer want use using get have has by at as from so too also".split()
)
_ZH_STOP = set("的了和与及就都也很更最比较一些一点请你我们他她它这那个些着过吗呢吧啊呀给把被让要是在不没还")


def slug_of(text: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9+#]+", text.lower()) if w not in _EN_STOP]
    han = "".join(ch for ch in text if "\u4e00" <= ch <= "\u9fff" and ch not in _ZH_STOP)
    if han and (not words or has_han(text[:8])):
        return han[:8]
    return "_".join(words[:4])


def topic_of(text: str, topics: Sequence[tuple[str, re.Pattern[str]]]) -> str | None:
    return next((key for key, pattern in topics if pattern.search(text)), None)


def key_of(prefix: str, text: str, *, topics: Sequence[tuple[str, re.Pattern[str]]] = PREFERENCE_TOPICS) -> str:
    """The key of a statement about `text`: its attribute when it names one and is about
    it (the gate's own test, `facts.judging.wording.key_mismatch`: "long-distance running" names
    no response length), else `{prefix}_{subject words}`."""
    topic = topic_of(text, topics)
    if topic and not key_mismatch(topic, text):
        return topic
    slug = slug_of(text) or "general"
    return normalize_key(f"{prefix}_{slug}")[:60].rstrip("_")
