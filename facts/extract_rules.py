"""The embedded extractor: explicit first-person statements found by rules, no model.

Used when no model server is configured (`facts.extraction.active_extractor`). It reads
only the user's rows and proposes a `FactCandidate` for each explicit, first-person
statement it recognizes, in Chinese or English:

- preferences: "I prefer …", "please always …", "never …", "我喜欢/不喜欢 …", "以后请 …";
- identity and work: "my name is …", "I work as …", "I'm a … engineer", "我是 …",
  "我平时主要 …", "我在 … 工作";
- goals: "I'm learning …", "my goal is …", "我在学 …";
- corrections: "actually, …", "不对，…" in front of any of the above;
- project rules: "this repo uses …", "这个项目用 …" (scope project).

It labels what it finds the way the LLM is asked to (DESIGN.md §4): a one-off request
("just for this answer", "这次先…") is `temporary` and thread-scoped, a grant to act
("you can push …", "你可以直接部署") is `transactional`, a hedge ("maybe", "可能")
lowers the confidence, and a statement it only half recognizes gets a low confidence,
so the gate rejects all of them into the review queue instead of memory. Questions,
hypotheticals, other people ("my colleague prefers …") and the assistant's words give
nothing. The evidence is always a verbatim slice of the user's message.

Keys are stable: a known attribute (`response_language`, `indentation`, `editor`, `name`,
`occupation` …) when the statement names one, else the statement's subject words
(`pref_dark_mode`, `pref_深色主题`), so saying the same thing twice is a duplicate and a
changed value of the same attribute replaces the old card.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .enums import Authority, Category, Durability, Scope
from .filtering import Row, is_acknowledgement
from .schemas import normalize_key

NAME = "rules-v1"

# A statement about the user is one short sentence; longer "sentences" (code, logs,
# pasted documents) are skipped, which also keeps every rule linear in the input.
MAX_SENTENCE_CHARS = 400
# More than this from one message is a document, not a conversation turn.
MAX_FACTS_PER_MESSAGE = 20

# Confidence levels. The gate's default threshold is 0.7: SURE and LIKELY pass, UNSURE
# goes to the review queue.
SURE = 0.9
LIKELY = 0.8
UNSURE = 0.45
HEDGED = 0.5

_I = re.IGNORECASE


@dataclass
class Statement:
    """What one clause says, before the sentence-level labels are applied."""

    category: str
    key: str
    content: str
    confidence: float
    scope: str = Scope.USER
    durability: str = Durability.DURABLE
    authority: str = Authority.DESCRIPTIVE
    # A durable marker of its own ("always", "以后"): survives a question as an unsure candidate.
    standing: bool = False


# --- splitting ------------------------------------------------------------------------

# Sentence ends: CJK and ASCII terminators, a period before a space, a line break.
_SENTENCE_END = re.compile(r"[。！？!?；;]+|\.(?=\s|$)|\n+")
# Clause breaks inside a sentence.
_CLAUSE_BREAK = re.compile(r"[，,、：:]|\s[—–-]{1,2}\s|\s(?=(?:and|but|so) (?:I|I'm|my|please)\b)")


def _spans(text: str, pattern: re.Pattern[str], start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """Non-empty stripped (start, end) pieces of text[start:end] between matches of `pattern`."""
    end = len(text) if end is None else end
    pieces, cursor = [], start
    for match in pattern.finditer(text, start, end):
        pieces.append((cursor, match.end()))
        cursor = match.end()
    pieces.append((cursor, end))
    out = []
    for a, b in pieces:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if a < b:
            out.append((a, b))
    return out


_TRAILING = " \t\r\n。．.！!？?；;，,、：:…~～—–-\"'“”‘’)）"
_LEADING = " \t\r\n，,、：:…~～—–-\"'“”‘’(（"


def _clean(text: str) -> str:
    return text.strip(_TRAILING).strip(_LEADING).strip(_TRAILING)


# --- lead-ins, labels -------------------------------------------------------------------

_EN_LEAD = re.compile(
    r"^(?:(?:oh|ok|okay|well|so|and|but|also|plus|btw|by the way|fyi|for the record|for context|"
    r"for your information|just so you know|just fyi|to be clear|one more thing|note that|note|"
    r"please remember that|please remember|remember that|remember|please note that|please note|"
    r"keep in mind that|keep in mind|ps|p\.s\.|honestly|to clarify|heads up|hey|hi|hello|thanks|"
    r"thank you|great|cool|sure|yes|yeah|maybe|perhaps|probably|i think|i guess|i suppose)\b[\s,:;.!—–-]*)+",
    _I,
)
_EN_CORRECTION = re.compile(
    r"^(?:actually|correction|no|nope|not quite|that's wrong|that is wrong|that's not right|"
    r"that's not true|sorry|i meant|what i meant is|i mean|let me correct (?:that|myself)|"
    r"to correct myself|wait|scratch that|update)\b[\s,:;.!—–-]*",
    _I,
)
_ZH_LEAD = re.compile(
    r"^(?:另外|还有|对了|顺便说一下|顺便说一句|顺便|补充一下|补充|说一下|提一下|跟你说一下|跟你说|告诉你|"
    r"请记住|记住|请记一下|记一下|你记住|麻烦记住|麻烦记一下|注意一下|注意|需要说明的是|说明一下|"
    r"不过|但是|而且|那么|那|嗯嗯|嗯|哦|好的|好吧|好|总之|总的来说|一般来说|重申一下|再说一遍|"
    r"谢谢|对|是的|嗨|你好|哈喽|可能|也许|大概|或许)[\s，,：:。！!]*"
)
_ZH_CORRECTION = re.compile(
    r"^(?:不对|不是的|不是这样的?|错了|你理解错了|你搞错了|我说错了|更正一下|更正|纠正一下|纠正|"
    r"我的意思是|我是说|应该是|准确地说|准确来说|严格来说|其实|实际上)[\s，,：:。！!]*"
)
_MEMORY_REQUEST = re.compile(r"^(?:please remember|remember|keep in mind|请记住|记住|记一下|你记住|麻烦记)", _I)

_EN_TEMPORARY = re.compile(
    r"\b(?:this time|just this once|this once|for now|for the moment|at the moment|right now|today|"
    r"tonight|tomorrow|temporarily|"
    r"(?:just )?(?:for|in) (?:this|that) (?:answer|reply|response|question|one|task|conversation|chat|thread|"
    r"session|message|function|file|snippet|bug|case|example|draft|email|pr|commit)|"
    r"this (?:answer|reply|response|question|task|week|morning|afternoon|evening)|"
    r"for the rest of (?:this|the) (?:conversation|chat|session|thread)|for (?:today|tonight|a while)|"
    r"until (?:tomorrow|tonight|the end of (?:the|this) (?:day|week|chat|conversation)))\b",
    _I,
)
_ZH_TEMPORARY = re.compile(
    r"这次|这一次|本次|这回|这一回|今天|今晚|明天|现在先|暂时|临时|先[^，。,]{0,12}吧|这个问题|这道题|"
    r"这段代码|这个函数|这个文件|这一段|这篇|这个回答|这条回复|刚才|这轮|本轮|这会儿|目前先|眼下|这周|本周"
)
_EN_DURABLE_WORDS = (
    r"always|never|from now on|going forward|in (?:the )?future|from here on(?: out)?|henceforth|"
    r"by default|in general|generally|every time|each time|whenever|all the time|as a rule|"
    r"for all (?:future )?(?:answers|replies|responses|code)|any time|anytime"
)
_EN_DURABLE = re.compile(rf"\b(?:{_EN_DURABLE_WORDS})\b", _I)
_ZH_DURABLE = re.compile(
    r"以后|今后|往后|之后都|从现在开始|从现在起|从今以后|从今往后|下次|每次|始终|一直|总是|永远|默认|一律|"
    r"统一|平时|平常|日常|一般|通常|长期|所有的?回答|任何时候"
)
_EN_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|probably|i think|i guess|i suppose|sometimes|occasionally|kind of|sort of|"
    r"might|not sure|possibly|i'm not sure|depends)\b",
    _I,
)
_ZH_HEDGE = re.compile(r"可能|也许|大概|好像|似乎|有时候|有时|偶尔|说不定|不一定|看情况|或许|不确定")
_EN_HYPOTHETICAL = re.compile(
    r"^(?:if|suppose|supposing|imagine|assuming|assume|what if|let's say|say|pretend|in case|unless|"
    r"when i was|back when|i used to|i once|i was|i had|i wonder|i heard|they say|he|she|they|"
    r"my (?:friend|colleague|coworker|co-worker|boss|manager|wife|husband|partner|son|daughter|mom|mother|"
    r"dad|father|brother|sister|teammate|team mate|client|customer|user|kid|kids|cat|dog)s?\b)\b",
    _I,
)
_ZH_HYPOTHETICAL = re.compile(
    r"^(?:如果|假如|要是|假设|万一|比如|例如|以前|之前|过去|小时候|当年|我以前|我之前|我过去|我曾经|曾经|"
    r"我朋友|我同事|我老板|我领导|我老婆|我老公|我妈|我爸|我哥|我姐|我弟|我妹|我儿子|我女儿|我们老师|"
    r"我客户|我的朋友|我的同事|我的老板|他|她|他们|她们|别人|有人)"
)
# Without a question mark only an inverted start counts ("how do I …", "can you …"):
# "When you write scripts, always …" is a standing request, not a question.
_EN_QUESTION_START = re.compile(
    r"^(?:(?:how|what|why|when|where|who|which|whose)(?:'s|\s+(?:do|does|did|is|are|was|were|can|could|should|"
    r"would|will|to|much|many|about|if))\b|why\b|(?:can|could|would|will|do|does|did|is|are|should|shall|may|am|"
    r"have|has)\s+(?:you|i|we|it|there|this|that|they)\b)",
    _I,
)
_ZH_QUESTION_WORDS = re.compile(r"吗|呢|么|能不能|可不可以|是不是|要不要|有没有|什么|怎么|为什么|如何|哪|多少|是否")
_ZH_QUESTION_END = re.compile(r"[吗嘛么呢][\s。.!！~～]*$")


def _is_question(sentence: str) -> bool:
    text = sentence.rstrip()
    if text.endswith(("?", "？")):
        return True
    if _ZH_QUESTION_END.search(text):
        return True
    head = _EN_LEAD.sub("", text)
    return bool(_EN_QUESTION_START.match(head))


def _asks(clause: str) -> bool:
    piece = _clean(_strip_leads(_clean(clause))[0])
    return bool(_EN_QUESTION_START.match(piece) or _ZH_QUESTION_WORDS.search(piece))


def _has_han(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


# --- keys -------------------------------------------------------------------------------

# Attributes a statement may name, most specific first. A changed value of the same
# attribute replaces the card; these also make keys agree across both languages.
_LANGS = (
    r"\b(?:english|chinese|mandarin|cantonese|japanese|korean|french|german|spanish|russian|portuguese|"
    r"italian)\b|中文|英文|英语|汉语|普通话|粤语|日语|日文|韩语|法语|德语|西班牙语|俄语|简体|繁体"
)
PREFERENCE_TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (key, re.compile(pattern, _I))
    for key, pattern in (
        # bounded gaps: an unbounded .* is quadratic on a long run of "comment comment …"
        (
            "code_comment_language",
            rf"(?:注释|comments?\b).{{0,80}}?(?:{_LANGS})|(?:{_LANGS}).{{0,80}}?(?:注释|comments?\b)",
        ),
        (
            "commit_message_language",
            rf"(?:commit|提交信息|提交说明).{{0,80}}?(?:{_LANGS})|(?:{_LANGS}).{{0,80}}?(?:commit|提交信息)",
        ),
        ("response_language", _LANGS),
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
_ATTRIBUTES: dict[str, tuple[str, str]] = {
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


def _slug(text: str) -> str:
    words = [w for w in re.findall(r"[a-z0-9+#]+", text.lower()) if w not in _EN_STOP]
    han = "".join(ch for ch in text if "\u4e00" <= ch <= "\u9fff" and ch not in _ZH_STOP)
    if han and (not words or _has_han(text[:8])):
        return han[:8]
    return "_".join(words[:4])


def _topic(text: str, topics: Sequence[tuple[str, re.Pattern[str]]]) -> str | None:
    return next((key for key, pattern in topics if pattern.search(text)), None)


def _key(prefix: str, text: str, *, topics: Sequence[tuple[str, re.Pattern[str]]] = PREFERENCE_TOPICS) -> str:
    topic = _topic(text, topics)
    if topic:
        return topic
    slug = _slug(text) or "general"
    return normalize_key(f"{prefix}_{slug}")[:60].rstrip("_")


# --- content ----------------------------------------------------------------------------

_PRONOUNS = (
    (re.compile(r"\bI'm\b"), "they're"),
    (re.compile(r"\bI am\b"), "they are"),
    (re.compile(r"\bI've\b"), "they've"),
    (re.compile(r"\bI'd\b"), "they'd"),
    (re.compile(r"\bI\b"), "they"),
    (re.compile(r"\bmyself\b", _I), "themselves"),
    (re.compile(r"\bmy\b", _I), "their"),
    (re.compile(r"\bmine\b", _I), "theirs"),
    (re.compile(r"\bme\b", _I), "them"),
)


def _third_person(text: str) -> str:
    for pattern, repl in _PRONOUNS:
        text = pattern.sub(repl, text)
    return text


def _third(verb: str) -> str:
    """'work with' → 'works with'."""
    first, _, rest = verb.partition(" ")
    if first.endswith(("s", "sh", "ch", "x", "o")):
        first += "es"
    elif first.endswith("y") and first[-2:-1] not in "aeiou":
        first = first[:-1] + "ies"
    else:
        first += "s"
    return f"{first} {rest}".strip()


def _en(template: str, x: str) -> str:
    return template.format(x=_third_person(_clean(x)))


def _zh(text: str) -> str:
    """'我比较喜欢X' → '用户比较喜欢X' (every 我 of the clause is the user)."""
    text = _clean(text)
    text = re.sub(r"^我们", "用户所在团队", text)
    return text.replace("我", "用户") if text.startswith("我") else "用户" + text.replace("我", "用户")


# --- English rules ----------------------------------------------------------------------


def _role(x: str) -> bool:
    head = re.split(r"\b(?:at|in|for|with|who|and|but|from|on)\b|[,(]", x, maxsplit=1, flags=_I)[0]
    return bool(ROLE_WORDS.search(head) or ZH_ROLE_WORDS.search(head))


_THREADISH = re.compile(
    r"^(?:this|that|these|those|it(?! when| if| whenever)|where this|how (?:this|you)|what you|"
    r"the (?:bug|code|error|file|function|answer|one|idea|approach|plan))\b",
    _I,
)


def _en_statement(clause: str) -> Statement | None:
    c = clause
    m = re.match(r"^my name(?:'s| is)\s+(?P<x>.+)", c, _I) or re.match(r"^i(?:'m| am) called\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.CONTEXT, "name", f"User's name is {x}.", SURE if len(x.split()) <= 4 else UNSURE)
    m = re.match(r"^(?:please\s+)?(?:you (?:can|may|should)\s+)?(?:just\s+)?(?:always\s+)?call me\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.PREFERENCE, "preferred_name", f"User wants to be called {x}.", SURE, standing=True)
    if re.match(r"^i(?:'d| would) (?:like|love) (?:you )?to be called\s+", c, _I):
        x = _clean(re.sub(r"^.*?called\s+", "", c, flags=_I))
        return Statement(Category.PREFERENCE, "preferred_name", f"User wants to be called {x}.", SURE, standing=True)

    # permissions: a grant to act is transactional, whatever it says about the future
    m = re.match(
        r"^(?:you (?:can|may|are allowed to|'re allowed to|have (?:my )?permission to|are free to|"
        r"(?:don't|do not|no longer) need to ask(?: me)?(?: before| to| for)?)|feel free to|go ahead and|"
        r"no need to ask(?: me)?(?: before| to| for)?|i (?:authori[sz]e|allow|permit) you to|"
        r"i give you (?:my )?permission to|you have my (?:permission|ok|blessing) to)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        x = _clean(m["x"])
        key = normalize_key("permission_" + (_slug(x).split("_")[0] or "act"))
        return Statement(
            Category.PREFERENCE, key, _en("User allows you to {x}.", x), LIKELY, authority=Authority.TRANSACTIONAL
        )

    m = re.match(r"^i(?:'m| am)\s+(?:currently\s+|now\s+|still\s+)?(?:learning|studying)\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        if _THREADISH.match(x):
            return None
        return Statement(Category.GOAL, _key("learning", x, topics=()), _en("User is learning {x}.", x), LIKELY)
    m = re.match(r"^i(?:'m| am)\s+(?:currently\s+)?(?:preparing|studying) for\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.GOAL, _key("preparing", x, topics=()), _en("User is preparing for {x}.", x), LIKELY)
    m = re.match(r"^i want to (?:become|be) (?:a|an)\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.GOAL, "career_goal", _en("User wants to become a {x}.", x), LIKELY)
    m = re.match(r"^i(?:'m| am) (?:trying|planning|hoping) to\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.GOAL, _key("goal", x, topics=()), _en("User is trying to {x}.", x), UNSURE)

    m = re.match(r"^my\s+(?P<attr>[a-z][a-z' -]{0,30}?)\s+(?:is|are)\s+(?P<x>.+)", c, _I)
    if m:
        attr, x = m["attr"].lower().strip(), _clean(m["x"])
        fav = re.match(r"^(?:favou?rite|preferred|go-to|default)\s+(?P<what>.+)$", attr)
        if fav:
            what = fav["what"]
            key = (
                normalize_key("favorite_" + what)
                if fav.group(0).startswith("fav")
                else normalize_key("preferred_" + what)
            )
            return Statement(Category.PREFERENCE, key[:60], _en(f"User's {attr} is {{x}}.", x), SURE)
        main = re.match(r"^(?:main|primary|daily)\s+(?P<what>.+)$", attr)
        if main and main["what"] in ("editor", "language", "programming language", "os", "stack", "shell", "ide"):
            key = {"language": "programming_language", "programming language": "programming_language"}.get(
                main["what"], _ATTRIBUTES.get(main["what"], (normalize_key(main["what"]), ""))[0]
            )
            return Statement(Category.CONTEXT, key, _en(f"User's {attr} is {{x}}.", x), SURE)
        if attr in _ATTRIBUTES:
            key, category = _ATTRIBUTES[attr]
            return Statement(category, key, _en(f"User's {attr} is {{x}}.", x), SURE)
        return None

    m = re.match(r"^i work (?P<prep>as|at|for|in|on)\s+(?P<x>.+)", c, _I)
    if m:
        prep, x = m["prep"].lower(), _clean(m["x"])
        if _THREADISH.match(x) or _EN_TEMPORARY.search(x):
            return None
        if prep == "as":
            return Statement(Category.CONTEXT, "occupation", _en("User works as {x}.", x), SURE)
        if prep in ("at", "for"):
            return Statement(Category.CONTEXT, "employer", _en(f"User works {prep} {{x}}.", x), SURE)
        if prep == "in" and _topic(x, TOOL_TOPICS) == "programming_language":
            return Statement(Category.CONTEXT, "primary_stack", _en("User works in {x}.", x), LIKELY)
        key = "industry" if prep == "in" else "work_focus"
        return Statement(Category.CONTEXT, key, _en(f"User works {prep} {{x}}.", x), LIKELY)

    m = re.match(r"^i(?:'m| am|'ve been| have been)\s+(?:a|an)\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        fan = re.match(r"^(?:big |huge )?fan of\s+(?P<y>.+)", x, _I)
        if fan:
            y = fan["y"]
            return Statement(Category.PREFERENCE, _key("likes", y), _en("User is a fan of {x}.", y), LIKELY)
        if re.match(r"^native\b.*\bspeaker\b", x, _I):
            return Statement(Category.CONTEXT, "native_language", _en("User is a {x}.", x), SURE)
        if _role(x):
            return Statement(Category.CONTEXT, "occupation", _en("User is a {x}.", x), SURE)
        return None
    m = re.match(
        r"^i(?:'m| am)\s+(?P<adj>new to|familiar with|not familiar with|unfamiliar with|experienced (?:in|with)|"
        r"fluent in|proficient (?:in|with)|comfortable with|not comfortable with|good at|bad at|not good at|"
        r"allergic to|based in|located in|originally from|from|living in|vegetarian|vegan|colou?r-?blind|"
        r"left-handed|dyslexic|deaf|hard of hearing|retired|self-employed|a native (?:\w+ )?speaker(?: of)?)"
        r"\b\s*(?P<x>.*)",
        c,
        _I,
    )
    if m:
        adj, x = m["adj"].lower(), _clean(m["x"])
        if _THREADISH.match(x):
            return None
        if adj in ("based in", "located in", "living in"):
            return Statement(Category.CONTEXT, "location", _en(f"User is {adj} {{x}}.", x), SURE)
        if adj in ("from", "originally from"):
            if re.match(r"^(?:the|a|an|our|my|this|that)\b", x, _I) or not x[:1].isupper():
                return None  # "I'm from the QA team" is not where they come from
            return Statement(Category.CONTEXT, "hometown", _en(f"User is {adj} {{x}}.", x), LIKELY)
        if adj.startswith("a native"):
            return Statement(Category.CONTEXT, "native_language", _en("User is {x}.", clause[clause.lower().index("a native"):]), SURE)  # fmt: skip
        if adj == "allergic to":
            return Statement(Category.CONTEXT, "allergies", _en("User is allergic to {x}.", x), SURE)
        if not x:
            return Statement(Category.CONTEXT, normalize_key(adj), _en("User is {x}.", adj), SURE)
        key = normalize_key("familiarity_" + (_slug(x) or "general"))[:60]
        return Statement(Category.CONTEXT, key, _en(f"User is {adj} {{x}}.", x), LIKELY)
    m = re.match(r"^i live in\s+(?P<x>.+)", c, _I)
    if m:
        return Statement(Category.CONTEXT, "location", _en("User lives in {x}.", m["x"]), SURE)
    m = re.match(r"^i speak\s+(?P<x>.+)", c, _I)
    if m and re.search(_LANGS, m["x"], _I):
        return Statement(Category.CONTEXT, "languages_spoken", _en("User speaks {x}.", m["x"]), LIKELY)

    # dislikes before likes: "I don't like" contains "like"
    m = re.match(
        r"^i\s+(?:really\s+|just\s+|generally\s+|usually\s+|honestly\s+)?(?:don't|do not|dont|never)\s+"
        r"(?P<verb>like|love|enjoy|want|need|use|care for)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        verb, x = m["verb"].lower(), _clean(m["x"])
        if _THREADISH.match(x):
            return None
        if verb == "use":
            return Statement(Category.CONTEXT, _key("uses", x, topics=TOOL_TOPICS), _en("User does not use {x}.", x), LIKELY)  # fmt: skip
        confidence = LIKELY if verb in ("want", "need") else SURE
        return Statement(Category.PREFERENCE, _key("pref", x), _en(f"User does not {verb} {{x}}.", x), confidence)
    m = re.match(
        r"^i\s+(?:really\s+|just\s+)?(?P<verb>hate|dislike|can't stand|cannot stand|detest)\s+(?P<x>.+)", c, _I
    )
    if m:
        x = _clean(m["x"])
        if _THREADISH.match(x):
            return None
        return Statement(Category.PREFERENCE, _key("pref", x), _en("User dislikes {x}.", x), SURE)

    m = re.match(
        r"^i\s+(?P<adv>(?:(?:really|strongly|generally|usually|much|definitely|always|still|also|do|mostly|"
        r"personally)\s+)*)(?P<verb>prefer|like|love|enjoy|favou?r|want|need)s?\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        verb, x = m["verb"].lower(), _clean(m["x"])
        if _THREADISH.match(x) or not x:
            return None
        if verb in ("want", "need"):
            if not (re.match(r"^(?:you to )?(?:always|never)\b", x, _I) or _topic(x, PREFERENCE_TOPICS)):
                return None  # "I want a function that …" is a task
            return Statement(Category.PREFERENCE, _key("pref", x), _en("User wants {x}.", x), LIKELY)
        third = {"prefer": "prefers", "like": "likes", "love": "loves", "enjoy": "enjoys"}.get(verb, "favors")
        return Statement(Category.PREFERENCE, _key("pref", x), _en(f"User {third} {{x}}.", x), SURE)
    m = re.match(r"^i(?:'d| would)\s+(?:much\s+)?(?P<verb>prefer|rather|like|love)\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        if _THREADISH.match(x) or not x:
            return None
        standing = bool(_EN_DURABLE.search(x))
        # "I'd rather you not use bullet points" addresses how to work with them
        addressed = bool(re.match(r"^(?:that )?you\s+(?:not|never|always|didn't|don't|do not|avoid|stop)\b", x, _I))
        confidence = LIKELY if standing or addressed else UNSURE
        return Statement(Category.PREFERENCE, _key("pref", x), _en("User would prefer {x}.", x), confidence, standing=standing)  # fmt: skip

    m = re.match(
        r"^i\s+(?P<adv>(?:(?:usually|mostly|mainly|primarily|generally|normally|typically|always|often|only|"
        r"exclusively|daily|also)\s+)*)(?P<verb>use|work with|code in|program in|write in|develop in|develop with|"
        r"build with|write|run|develop|deploy to|deploy on|code)\s+(?P<x>.+)",
        c,
        _I,
    )
    if m:
        adv, verb, x = m["adv"].strip().lower(), m["verb"].lower(), _clean(m["x"])
        if _THREADISH.match(x) or re.search(r"\b(?:here|in this|for this)\b", x, _I):
            return None
        habitual = bool(adv) and "also" not in adv
        strong = verb in ("use", "work with", "code in", "program in", "write in", "develop in", "develop with")
        confidence = LIKELY if habitual or strong else UNSURE
        topic = _topic(x, TOOL_TOPICS)
        key = (
            "primary_stack"
            if topic == "programming_language" and verb != "use"
            else topic or _key("uses", x, topics=())
        )
        phrase = f"{adv} {_third(verb)}".strip()
        return Statement(Category.CONTEXT, key, _en(f"User {phrase} {{x}}.", x), confidence)

    # standing instructions
    m = re.match(
        r"^(?:please\s+)?(?:(?:do not|don't) ever|never ever|never|always|make sure to always)\s+(?P<x>.+)", c, _I
    )
    if m and not re.match(r"^(?:mind|again|ever)\b", m["x"], _I):
        x = _clean(m["x"])
        word = "never" if re.match(r"^(?:please\s+)?(?:do not|don't|never)", c, _I) else "always"
        return Statement(
            Category.PREFERENCE, _key("pref", x), _en(f"User wants you to {word} {{x}}.", x), SURE, standing=True
        )
    m = re.match(
        r"^(?:please\s+)?(?:from now on|going forward|in (?:the )?future|from here on(?: out)?|henceforth|"
        r"by default|in general|as a rule|for all (?:future )?(?:answers|replies|responses))\s*[,:]?\s*(?:please\s+)?(?P<x>.+)",
        c,
        _I,
    )
    if m and m["x"]:
        x = _clean(m["x"])
        if re.match(r"^i\b", x, _I):  # "By default, I use vim"
            inner = _en_statement(x)
            wish = re.match(r"^i (?:want|need|'d like|would like)\s+(?P<y>.+)", x, _I)
            if inner is None and wish:  # "In general I want the shortest solution": a standing wish
                y = wish["y"]
                inner = Statement(Category.PREFERENCE, _key("pref", y), _en("User wants {x}.", y), SURE)
            if inner is not None:
                inner.standing = True
            return inner
        # "In general, the code looks fine" is no request
        if not (_EN_IMPERATIVE.match(x) or _topic(x, PREFERENCE_TOPICS)):
            return None
        return Statement(Category.PREFERENCE, _key("pref", x), _en("User's standing request: {x}.", x), SURE, standing=True)  # fmt: skip
    m = re.match(r"^(?:please\s+)?(?:whenever|every time|each time|any time) you\s+(?P<x>.+)", c, _I)
    if m:
        x = _clean(m["x"])
        return Statement(Category.PREFERENCE, _key("pref", x), _en("User's standing request: whenever you {x}.", x), LIKELY, standing=True)  # fmt: skip
    return None


# --- project rules ------------------------------------------------------------------------

# Only rules of a repository or project ("this repo uses …"), never a passing remark
# about it ("the app is broken"): no bare "is"/"has", no "the".
_EN_PROJECT = re.compile(
    r"^(?:(?:this|our) (?:repo|repository|project|codebase|code base|monorepo)(?:'s)?\s+"
    r"(?:uses|requires|runs on|targets|follows|prefers|needs|must|should|always|never|only|"
    r"deploys to|is deployed (?:to|on)|is written in|builds with)\b|"
    r"(?:in|for) (?:this|our) (?:repo|repository|project|codebase)\s*,?\s*we\s+(?:always |never |only )?"
    r"(?:use|squash|rebase|deploy|write|follow|require|prefer|run|pin|keep|avoid|target|lint|format|test|"
    r"build|name|tag|release)\b|"
    r"we (?:always |usually |never |only )?(?:use|squash|rebase|deploy|write|follow|require|prefer|run)\b"
    r".{0,200}?\b(?:here|in this (?:repo|repository|project|codebase))\b)",
    _I,
)
_ZH_PROJECT = re.compile(
    r"^(?:这个|本|我们的?|当前)(?:项目|仓库|代码库|repo|工程)(?:里|中|的)?(?:都|统一|一律|必须|要求|规定)?"
    r"(?:用|使用|采用|基于|要求|规定|统一|必须|不允许|禁止|跑在|部署在|遵循)"
)


def _project_statement(clause: str) -> Statement | None:
    if _EN_PROJECT.match(clause) or _ZH_PROJECT.match(clause):
        text = _clean(clause)
        content = text[0].upper() + text[1:] + ("" if _has_han(text) else ".")
        topic = _topic(text, TOOL_TOPICS + PREFERENCE_TOPICS)
        if re.search(r"\b(?:postgres(?:ql)?|mysql|sqlite|mongodb|redis)\b|数据库", text, _I):
            topic = "database"
        subject = re.sub(r"^(?:(?:in|for)\s+)?(?:this|our)\s+\w+\s*,?\s*(?:we\s+)?", "", text, flags=_I)
        key = normalize_key("project_" + (topic or _slug(subject) or "rule"))
        return Statement(Category.CONTEXT, key[:60], content, LIKELY, scope=Scope.PROJECT)
    return None


# --- Chinese rules ------------------------------------------------------------------------


_ZH_EVENT = re.compile(r"会|报错|出错|失败|崩溃|卡住|超时|返回")


def _zh_statement(clause: str) -> Statement | None:
    c = clause
    m = re.match(r"^(?:我的名字(?:是|叫)|我叫)(?P<x>[^了过着]{1,20})$", c)
    if m:
        x = _clean(m["x"])
        return Statement(Category.CONTEXT, "name", f"用户的名字是{x}", SURE if len(x) <= 8 else UNSURE)
    m = re.match(
        r"^(?:你)?(?:以后)?(?:可以|就)?(?:请)?(?:都)?(?:叫|称呼|喊)我(?P<x>.{1,12}?)(?:就行了?|就好|就可以了?|吧|好了)?$",
        c,
    )
    if m:
        x = _clean(m["x"])
        return Statement(Category.PREFERENCE, "preferred_name", f"用户希望被称为{x}", SURE, standing=True)

    # permissions
    m = re.match(
        r"^(?:以后|今后|从现在开始)?(?:你)?(?:以后)?(?:都)?(?:可以|能|有权限?|随时可以)(?:直接|随时|自己|自行|放心)?(?P<x>.+)|"
        r"^(?:我)?(?:允许|授权|批准)你(?P<y>.+)|^(?P<z>(?:以后)?(?:都)?(?:不用|不需要|无需)(?:再)?(?:问我|征求我的?同意|确认).*)|"
        r"^直接(?P<w>.+?)(?:吧|就行|就好)$",
        c,
    )
    if m:
        x = _clean(m["x"] or m["y"] or m["z"] or m["w"] or "")
        if x:
            slug = _slug(x)
            ascii_verb = re.search(r"push|deploy|merge|commit|release|publish|delete|install|restart", x, _I)
            key = "permission_" + (ascii_verb.group(0).lower() if ascii_verb else slug[:4])
            return Statement(
                Category.PREFERENCE,
                normalize_key(key)[:60],
                f"用户允许你{x}",
                LIKELY,
                authority=Authority.TRANSACTIONAL,
            )

    m = re.match(r"^我是做(?P<x>.+?)的$", c)
    if m:
        x = _clean(m["x"])
        return Statement(Category.CONTEXT, "occupation", f"用户是做{x}的", SURE)
    m = re.match(r"^我是(?P<x>.+)$", c)
    if m:
        x = _clean(m["x"])
        if re.match(r"^(?:不是|否|在|说|想|要|觉得|问|因为|为了|来问|刚|第一次)", x):
            return None
        if re.match(r"^(?:来自|从)", x) or re.search(r"^[一-龥]{1,6}人$", x):
            return Statement(Category.CONTEXT, "hometown", f"用户是{x}", LIKELY)
        if re.search(r"新手|初学者|小白|零基础", x):
            subject = re.sub(r"新手|初学者|小白|零基础|的|一[个名位]", "", x)
            return Statement(Category.CONTEXT, normalize_key("familiarity_" + (_slug(subject) or "general"))[:60], f"用户是{x}", LIKELY)  # fmt: skip
        if ZH_ROLE_WORDS.search(x) or ROLE_WORDS.search(x):
            return Statement(Category.CONTEXT, "occupation", f"用户是{x}", SURE)
        if re.search(r"素食|过敏|色盲|左撇子", x):
            return Statement(Category.CONTEXT, _key("about", x, topics=()), f"用户是{x}", LIKELY)
        return Statement(Category.CONTEXT, _key("about", x, topics=()), f"用户是{x}", UNSURE)

    m = re.match(
        r"^我(?:目前|现在)?在(?P<org>[^，,。]{1,24}?)(?P<verb>工作|上班|实习|任职|读书|上学|读研|读博|念书)", c
    )
    if m:
        org = _clean(m["org"])
        key = "school" if m["verb"] in ("读书", "上学", "读研", "读博", "念书") else "employer"
        return Statement(Category.CONTEXT, key, f"用户在{org}{m['verb']}", SURE)
    m = re.match(
        r"^我(?:最近|现在|目前|正在|还在|接下来|今年|明年|这几个月|接下来几个月|这段时间|打算|准备|会)*(?:在)?(?:系统地?|认真|开始)?"
        r"(?:学习|自学|学)(?!校|院|生)(?P<x>.+)",
        c,
    )
    if m:
        x = _clean(m["x"])
        if x and not re.match(r"^(?:了|过|会|着|这个|这段|一下)", x):
            return Statement(Category.GOAL, normalize_key("learning_" + (_slug(x) or "general"))[:60], "用户在学" + x, LIKELY)  # fmt: skip
    m = re.match(r"^我(?:最近|现在|目前|正在)*(?:在)?(?:准备|备考|备战)(?P<x>.+)", c)
    if m:
        x = _clean(m["x"])
        return Statement(Category.GOAL, normalize_key("preparing_" + (_slug(x) or "general"))[:60], "用户在准备" + x, LIKELY)  # fmt: skip
    m = re.match(r"^我(?:的)?(?:长期)?(?:目标|梦想|理想)是(?P<x>.+)", c) or re.match(r"^我(?:想|希望|打算)(?:以后|将来|未来)?(?:成为|当)(?:一[名个位])?(?P<x>.+)", c)  # fmt: skip
    if m:
        x = _clean(m["x"])
        return Statement(Category.GOAL, "long_term_goal", _zh(c), LIKELY)

    m = re.match(r"^我(?:住在|生活在|定居在|定居|常驻)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "location", "用户住在" + _clean(m["x"]), SURE)
    m = re.match(r"^我(?:来自|老家在|老家是)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "hometown", "用户来自" + _clean(m["x"]), LIKELY)

    m = re.match(r"^我的(?P<attr>[一-龥A-Za-z ]{1,8}?)是(?P<x>.+)", c)
    if m:
        attr, x = m["attr"].strip(), _clean(m["x"])
        fav = re.match(r"^(?:最喜欢的|最爱的|首选的?|常用的|最常用的|默认的?)(?P<what>.+)$", attr)
        if fav:
            what = fav["what"]
            mapped = _ATTRIBUTES.get(what, (None, None))[0]
            key = normalize_key("favorite_" + (mapped or _topic(x, TOOL_TOPICS) or _slug(what) or "thing"))
            return Statement(Category.PREFERENCE, key[:60], f"用户{attr}是{x}", SURE)
        if attr in _ATTRIBUTES:
            key, category = _ATTRIBUTES[attr]
            return Statement(category, key, f"用户的{attr}是{x}", SURE)
        return None

    # dislikes before likes
    m = re.match(
        r"^我(?:也|还|很|挺|比较|特别|非常|一直|向来|从来|真的|就|最|实在|可能|也许|大概|好像|或许)*(?P<verb>不太喜欢|不怎么喜欢|不喜欢|讨厌|受不了|"
        r"反感|不习惯|不想看到|不想要|不需要|不爱|烦)(?P<x>.+)",
        c,
    )
    if m:
        x = _clean(m["x"])
        if re.match(r"^(?:这个|这段|这种回答|这样|你刚才|刚才)", x):
            return None
        return Statement(Category.PREFERENCE, _key("pref", x), f"用户{m['verb']}{x}", SURE)
    m = re.match(
        r"^我(?P<adv>(?:也|还|很|挺|比较|更|最|特别|非常|一直|向来|还是|一般|通常|都|真的|就|个人|可能|也许|大概|好像|或许)*)"
        r"(?P<verb>喜欢|偏好|偏爱|倾向于|倾向|习惯|爱|更愿意|愿意|希望|想要|需要|要求)(?P<x>.+)",
        c,
    )
    if m:
        verb, x = m["verb"], _clean(m["x"])
        if re.match(r"^(?:这个|这段|这种回答|这样|你刚才|刚才|了|过)", x) or not x:
            return None
        if verb in ("希望", "想要", "需要", "要求", "愿意"):
            if re.search(r"帮我|帮忙|一个|一份|一段|你能|看看|看一下", x) and not _ZH_DURABLE.search(x):
                return None  # a task, not a preference
            if not (_topic(x, PREFERENCE_TOPICS) or _ZH_DURABLE.search(x)):
                return None
            return Statement(Category.PREFERENCE, _key("pref", x), f"用户希望{x}", LIKELY)
        return Statement(Category.PREFERENCE, _key("pref", x), _zh(c), SURE)

    m = re.match(
        r"^我(?P<adv>(?:日常工作中?|平时|平常|日常|一般|通常|主要|基本上|基本|工作中|工作上|现在|目前|也)+)(?P<rest>.+)",
        c,
    )
    if m:
        adv, rest = m["adv"], _clean(re.sub(r"^(?:就)?是", "", m["rest"]))
        if not re.search(r"平时|平常|日常|一般|通常|主要|基本|工作", adv):
            return None
        if re.match(r"^(?:做|负责|从事|搞|写|开发|在)", rest):
            topic = _topic(rest, TOOL_TOPICS)
            key = "primary_stack" if topic == "programming_language" else topic or "primary_work"
            return Statement(Category.CONTEXT, key, _zh(c), SURE)
        if re.match(r"^(?:用|使用)", rest):
            topic = _topic(rest, TOOL_TOPICS)
            key = "primary_stack" if topic == "programming_language" else topic or _key("uses", rest, topics=())
            return Statement(Category.CONTEXT, key, _zh(c), SURE)
        return Statement(Category.CONTEXT, _key("habit", rest, topics=()), _zh(c), UNSURE)
    m = re.match(r"^我(?P<verb>负责|从事|的工作是)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "primary_work", _zh(c), SURE)
    m = re.match(r"^我(?:对|跟)(?P<x>.+?)(?:很|不太|不|比较|非常)?(?P<adj>熟悉|熟|了解|陌生|不熟|过敏)", c)
    if m:
        x = _clean(m["x"])
        key = "allergies" if m["adj"] == "过敏" else normalize_key("familiarity_" + (_slug(x) or "general"))[:60]
        return Statement(Category.CONTEXT, key, _zh(c), LIKELY)
    m = re.match(r"^我(?:不会|不懂|不太懂|刚开始学|刚学|刚接触)(?P<x>.+)", c)
    if m:
        x = _clean(m["x"])
        return Statement(Category.CONTEXT, normalize_key("familiarity_" + (_slug(x) or "general"))[:60], _zh(c), LIKELY)  # fmt: skip
    m = re.match(r"^我(?:一直|每天|总是|经常)?(?:用|使用)(?P<x>.+)", c)
    if m:
        x = _clean(m["x"])
        topic = _topic(x, TOOL_TOPICS)
        if topic and not _ZH_TEMPORARY.search(x):
            return Statement(Category.CONTEXT, topic, _zh(c), LIKELY)
        return None

    # standing instructions
    # a short subject may come first: "技术问题还是默认用中文解释"
    m = re.match(
        r"^(?:[一-龥A-Za-z ]{1,8}?(?:还是|也|都)?(?=默认|以后|今后|始终|一律|统一))?"
        r"(?:请|麻烦)?(?:你)?(?P<when>以后|今后|往后|之后都|从现在开始|从现在起|从今以后|从今往后|下次|每次|始终|一直|"
        r"总是|永远|默认|平时|平常|一般|通常|所有的?回答)(?:都|也|就|请|麻烦|记得|统一|一律|尽量|全部|还是|要|务必|你)*"
        r"(?P<x>.+)",
        c,
    )
    if m:
        when, x = m["when"], _clean(m["x"])
        if not x or re.match(r"^(?:再|可能|会|我们再|聊|说吧|的事|有机会)", x):
            return None
        if x.startswith("我"):
            inner = _zh_statement(x)
            if inner is not None:
                inner.standing = True
            return inner
        # "每次运行都会报错" is a bug report, not a standing request: ask for a request.
        if not ("请" in x or _ZH_IMPERATIVE.match(x) or (_topic(x, PREFERENCE_TOPICS) and not _ZH_EVENT.search(x))):
            return None
        x = re.sub(r"请|麻烦", "", x)
        content = f"用户希望{when}{x}" if m.start("when") == 0 else "用户希望" + re.sub(r"请|麻烦", "", _clean(c))
        return Statement(Category.PREFERENCE, _key("pref", x), content.replace("我", "用户"), SURE, standing=True)
    m = re.match(r"^(?:请)?(?:你)?(?:千万)?(?P<neg>不要再|别再|再也不要|永远不要|不要|别)(?P<x>.+)", c)
    if m:
        x = _clean(m["x"])
        if m["neg"] in ("不要再", "别再", "再也不要", "永远不要"):
            # "别再…" asks for a lasting change, whatever it is about
            x = re.sub(r"了$", "", x)
            return Statement(Category.PREFERENCE, _key("pref", x), f"用户希望你不要再{x}".replace("我", "用户"), LIKELY, standing=True)  # fmt: skip
        return None  # a plain "不要用X" is judged as an imperative (`_imperative`)
    return None


# --- driving it ---------------------------------------------------------------------------


@dataclass
class _Found:
    statement: Statement
    start: int
    end: int


_CONTINUATION_STOP = re.compile(
    r"^(?:but|because|so|though|although|since|which|if|unless|and then|then|however|而|但|但是|可是|不过|因为|所以|"
    r"如果|要是|然后|另外|还有|谢谢|thanks|thank you)",
    _I,
)


def _strip_leads(text: str) -> tuple[str, int, bool, bool]:
    """Drop discourse openers; return the rest, how much was dropped, correction?, memory request?"""
    correction = memory = False
    offset = 0
    while True:
        before = offset
        for pattern in (_EN_LEAD, _ZH_LEAD):
            m = pattern.match(text, offset)
            if m and m.end() > offset:
                memory = memory or bool(_MEMORY_REQUEST.match(m.group(0)))
                offset = m.end()
        for pattern in (_EN_CORRECTION, _ZH_CORRECTION):
            m = pattern.match(text, offset)
            if m and m.end() > offset:
                # "no need to ask" is a grant, not a correction
                if pattern is _EN_CORRECTION and re.match(r"no (?:need|longer)", text[offset:], _I):
                    continue
                correction = True
                offset = m.end()
        if offset == before:
            break
    return text[offset:], offset, correction, memory


_EN_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:answer|reply|respond|write|explain|use|give|show|keep|add|include|avoid|put|format|"
    r"speak|talk|make|be|stop|start|skip|stick to|go with|default to|don't|do not|switch to|translate|"
    r"comment|name|indent|add)\b",
    _I,
)
_ZH_IMPERATIVE = re.compile(
    r"^(?:请|麻烦|用|给|写|回答|解释|回复|保持|加上|加|不要|别|多用|少用|多|少|先|说|讲|尽量|统一|都用|使用|采用|附上|"
    r"带上|换成|改用|翻译|注释)"
)
_EN_TEMPORARY_PREFIX = re.compile(
    r"^(?:just\s+)?(?:this time|this once|just this once|for now|today|right now|tonight)\s*,?\s*", _I
)
_ZH_TEMPORARY_PREFIX = re.compile(r"^(?:这次|这一次|本次|这回|今天|今晚|现在|暂时|临时)(?:先|就|请|都|也|麻烦|的话)*")


def _imperative(clause: str, *, marked: bool) -> Statement | None:
    """A request to the assistant ("reply in English", "用中文回答"). Only worth a candidate
    when a marker says how long it holds (labelled by `_label`), or when it names a known
    preference (then it is unsure: one request is not yet a habit)."""
    body = _ZH_TEMPORARY_PREFIX.sub("", _EN_TEMPORARY_PREFIX.sub("", clause))
    # after "从现在开始，" a request may open with its subject: "变量名统一用英文"
    subject_first = (
        marked and bool(re.search(r"请|统一|一律|都用|都要|要用|改用|用", body)) and not _ZH_EVENT.search(body)
    )
    if not body or not (_EN_IMPERATIVE.match(body) or _ZH_IMPERATIVE.match(body) or subject_first):
        return None
    in_clause = bool(
        _EN_TEMPORARY.search(clause) or _ZH_TEMPORARY.search(clause) or _EN_DURABLE.search(clause)
        or _ZH_DURABLE.search(clause) or body != clause
    )  # fmt: skip
    topic = _topic(body, PREFERENCE_TOPICS)
    if not (marked or in_clause or topic):
        return None
    confidence = SURE if (marked or in_clause) else UNSURE
    if _has_han(body):
        content = "用户要求：" + _clean(body).rstrip("吧呀啊").replace("我", "用户")
    else:
        content = _en("User's request: {x}.", re.sub(r"^please\s+", "", body, flags=_I))
    return Statement(Category.PREFERENCE, _key("pref", body), content, confidence)


def _analyze(clause: str, *, marked: bool = False) -> Statement | None:
    if not clause:
        return None
    if _EN_HYPOTHETICAL.match(clause) or _ZH_HYPOTHETICAL.match(clause):
        return None
    return (
        _project_statement(clause)
        or _en_statement(clause)
        or _zh_statement(clause)
        or _imperative(clause, marked=marked)
    )


def _statements(text: str) -> list[_Found]:
    found: list[_Found] = []
    for s_start, s_end in _spans(text, _SENTENCE_END):
        if s_end - s_start > MAX_SENTENCE_CHARS:
            continue  # pasted code, logs, a wall of text: not a statement about the user
        sentence = text[s_start:s_end]
        question = _is_question(sentence)
        # hypotheticals and conditions govern the whole sentence
        lead_free, _, _, _ = _strip_leads(sentence)
        if _EN_HYPOTHETICAL.match(lead_free) or _ZH_HYPOTHETICAL.match(lead_free):
            continue
        clauses = _spans(text, _CLAUSE_BREAK, s_start, s_end)

        # In "我喜欢用 vim，你有什么插件推荐吗？" only the last clause asks.
        asking = [question and (i == len(clauses) - 1 or _asks(text[a:b])) for i, (a, b) in enumerate(clauses)]
        pending_temporary = pending_durable = pending_correction = pending_memory = False
        modifier_start: int | None = None
        index = 0
        while index < len(clauses):
            c_start, c_end = clauses[index]
            raw = _clean(text[c_start:c_end])
            body, _, correction, memory = _strip_leads(raw)
            body = _clean(body)
            statement = _analyze(body, marked=pending_temporary or pending_durable)
            if statement is None:
                index += 1
                if not body or is_acknowledgement(raw):
                    pending_correction = pending_correction or correction
                    pending_memory = pending_memory or memory
                    if modifier_start is None and (correction or memory):
                        modifier_start = c_start
                    continue
                # a bare modifier ("From now on", "这次", "以后的话") labels the next clause
                bare_temp = bool(_EN_TEMPORARY.fullmatch(body) or re.fullmatch(rf"(?:{_ZH_TEMPORARY.pattern})(?:的话)?(?:先)?", body))  # fmt: skip
                bare_durable = bool(
                    re.fullmatch(rf"(?:please\s+)?(?:{_EN_DURABLE_WORDS})", body, _I)
                    or re.fullmatch(rf"(?:{_ZH_DURABLE.pattern})(?:的话)?(?:都|也)?", body)
                )
                if bare_temp or bare_durable or correction:
                    pending_temporary = pending_temporary or bare_temp
                    pending_durable = pending_durable or bare_durable
                    pending_correction = pending_correction or correction
                    pending_memory = pending_memory or memory
                    if modifier_start is None:
                        modifier_start = c_start
                    continue
                pending_temporary = pending_durable = pending_correction = pending_memory = False
                modifier_start = None
                continue
            # the statement runs on over clauses that add to it ("…, with examples", "…，也喜欢狗")
            end = c_end
            nxt = index + 1
            while nxt < len(clauses):
                n_start, n_end = clauses[nxt]
                piece = _clean(text[n_start:n_end])
                piece_body = _clean(_strip_leads(piece)[0])
                if (
                    not piece
                    or asking[nxt]
                    or is_acknowledgement(piece)
                    or _CONTINUATION_STOP.match(piece)
                    or _analyze(piece_body) is not None
                    or _EN_TEMPORARY.search(piece)
                    or _ZH_TEMPORARY.search(piece)
                ):
                    break
                end = n_end
                nxt += 1
            whole = text[c_start:end]
            if end > c_end:
                extended = _analyze(_clean(_strip_leads(_clean(whole))[0]))
                if extended is not None and extended.confidence >= statement.confidence:
                    statement = extended
            span_start = modifier_start if modifier_start is not None else c_start
            span_text = text[span_start:end]
            statement = _label(
                statement,
                span=span_text,
                question=any(asking[index:nxt]),
                temporary=pending_temporary,
                durable=pending_durable,
                correction=pending_correction or correction,
                memory=pending_memory or memory,
            )
            if statement is not None:
                found.append(_Found(statement, span_start, end))
            pending_temporary = pending_durable = pending_correction = pending_memory = False
            modifier_start = None
            index = nxt
    return found


def _label(
    statement: Statement,
    *,
    span: str,
    question: bool,
    temporary: bool,
    durable: bool,
    correction: bool,
    memory: bool,
) -> Statement | None:
    s = replace(statement)
    standing = s.standing or durable or bool(_EN_DURABLE.search(span) or _ZH_DURABLE.search(span))
    if question:
        # "Could you always answer in English?" is half a preference: a reviewer decides.
        if not standing or s.authority == Authority.TRANSACTIONAL:
            return None
        s.confidence = min(s.confidence, UNSURE)
    # "Always check the return value here": about this code, not about the user
    here = s.scope == Scope.USER and bool(re.search(r"\bhere\b|这里", span, _I))
    if temporary or here or _EN_TEMPORARY.search(span) or _ZH_TEMPORARY.search(span):
        s.durability = Durability.TEMPORARY
        if s.scope == Scope.USER:
            s.scope = Scope.THREAD
    if _EN_HEDGE.search(span) or _ZH_HEDGE.search(span):
        s.confidence = min(s.confidence, HEDGED)
    if correction and s.category == Category.PREFERENCE and s.authority == Authority.DESCRIPTIVE:
        s.category = Category.CORRECTION
    if memory and s.confidence >= LIKELY:
        s.confidence = SURE
    if standing and s.content.startswith("User's request:"):
        s.content = "User's standing request:" + s.content.removeprefix("User's request:")
    if standing and s.content.startswith("用户要求："):
        s.content = "用户长期要求：" + s.content.removeprefix("用户要求：")
    if s.authority == Authority.TRANSACTIONAL and not standing:
        s.durability = Durability.TEMPORARY
    return s


@dataclass
class RulesResult:
    arguments: dict[str, Any]  # a MemoryUpdate: {"facts": [...], "summaries": [], "confirmations": []}
    elapsed_ms: float


def _reuse_aliases(key: str, live_keys: set[str]) -> str:
    if key in live_keys:
        return key
    return next((alias for alias in ALIASES.get(key, ()) if alias in live_keys), key)


def extract_facts(rows: Sequence[Row], *, existing_facts: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """The fact candidates (MemoryUpdate's `facts` items) the rules find in the user's rows."""
    live_keys = {str(f.get("key", "")) for f in existing_facts}
    facts: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        if row.get("role") != "user":
            continue  # an assistant message is never evidence
        text = row.get("content") or ""
        for found in _statements(text)[:MAX_FACTS_PER_MESSAGE]:
            s = found.statement
            key = _reuse_aliases(s.key, live_keys)
            if (key, s.content) in seen:
                continue
            seen.add((key, s.content))
            facts.append(
                {
                    "key": key,
                    "content": s.content[:400],
                    "category": str(s.category),
                    "scope": str(s.scope),
                    "durability": str(s.durability),
                    "authority": str(s.authority),
                    "confidence": s.confidence,
                    "evidence_message_id": row["id"],
                    "evidence_text": text[found.start : found.end],
                }
            )
    return facts


def run(rows: Sequence[Row], *, existing_facts: Sequence[Mapping[str, Any]] = ()) -> RulesResult:
    started = time.perf_counter()
    facts = extract_facts(rows, existing_facts=existing_facts)
    arguments = {"facts": facts, "summaries": [], "confirmations": []}
    return RulesResult(arguments, (time.perf_counter() - started) * 1000)
