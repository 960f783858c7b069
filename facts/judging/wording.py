"""What a fact's words must be, whichever extractor wrote them (issue 35).

Three checks the gate runs on every fact candidate, model or rules:

- **Self-contained** (`dangling_words`): a fact is read months later, alone, in a memory
  block. "User loves them.", "User loves escaping to that world.", 用户很喜欢这种气质 point
  at something only the conversation held. A reference word counts as dangling unless
  the fact itself names what it points at (a noun with a determiner, a number or a name
  before it: "User has two cats and feeds them daily").
- **Grounded** (`ungrounded_words`): what the fact says must be in the quoted user words.
  Every number and every name it mentions must be in the evidence, and when both are in
  the same script at least one of its content words must be too. This catches invented
  objects and numbers; it cannot catch a fact that reuses the evidence's words to say
  something else ("I love Paris" → "User lives in Paris").
- **Keys that mean what they say** (`key_mismatch`): the keys in `SINGLE_VALUED` name one
  attribute whose new value replaces the old card. A candidate may use one only when its
  text is about that attribute: mentioning French is not an answer-language preference,
  and "long-distance running" is not a response length.

These are word-level rules: no parser, so they are deliberately strict about the words
they know (a fact that trips one goes to the review queue with the reason, and a reviewer
can approve it) and blind to what they don't.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

_I = re.IGNORECASE

# --- self-contained ------------------------------------------------------------------

_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'’]*|\d+(?:[.,]\d+)*")
# Always pointing outside a fact: a demonstrative or "it" whose noun is elsewhere.
_EN_DEMONSTRATIVE = frozenset("this these those here".split())
# Pointing outside unless the fact names what they stand for before them.
_EN_ANAPHORA = frozenset("it its it's itself he him his she her hers herself himself".split())
# Words that put a noun after them: "a dog", "two cats", "their sister", "User's editor".
_EN_DETERMINERS = frozenset(
    "a an the their his her my our your every each some several many few two three four five six seven eight "
    "nine ten one both all".split()
)
_EN_PERSONS = frozenset(
    "mother father mom mum dad parent parents sister brother sibling siblings wife husband partner spouse son "
    "daughter child children kid kids baby friend friends boss colleague colleagues coworker teacher student "
    "grandmother grandfather grandma grandpa aunt uncle cousin girlfriend boyfriend niece nephew roommate "
    "neighbor neighbour manager mentor dog cat puppy kitten pet horse team".split()
)
# "that" right after these is a pronoun or a determiner ("escaping to that world",
# "loves that"), not the start of a clause ("movies that make them laugh").
_EN_THAT_OBJECT = frozenset(
    "to of in on at with about for from by like into than onto toward towards through loves likes enjoys "
    "prefers hates dislikes wants misses visited visits tried read watched saw is was are were love like enjoy "
    "prefer hate want miss finds found".split()
)
_EN_VERBS_BEFORE_OBJECT = frozenset(
    "loves likes enjoys prefers hates dislikes misses finds wants adores visits uses reads watches plays tries "
    "recommends".split()
)

_ZH_ANAPHORA = re.compile(
    r"它们?|(?<![其尤极与及])其(?![实他中余次它])|"
    r"[这那](?:个|些|种|样|里|儿|边|家|本|部|首|只|件|位|次|款|条|篇|段|类|场|座|所|间|张|支|把|台|辆|份|片|道|项|门|"
    r"时|天|年|会儿|是|就是)"
)
_ZH_PERSON_PRONOUN = re.compile(r"(?<![其吉])[他她](?:们)?")
_ZH_PERSONS = re.compile(
    r"妈妈|母亲|爸爸|父亲|父母|妹妹|弟弟|哥哥|姐姐|朋友|同事|老师|孩子|儿子|女儿|丈夫|妻子|老公|老婆|男朋友|女朋友|"
    r"上司|老板|领导|室友|邻居|爷爷|奶奶|外公|外婆|姥姥|姥爷|叔叔|阿姨|舅舅|表哥|表姐|表弟|表妹|堂哥|堂姐|同学|伴侣|"
    r"宝宝|猫|狗|宠物"
)


def _named_before(words: list[str], upto: int) -> bool:
    """Does the fact name something before position `upto` that a pronoun could stand
    for: a name, a person or pet word, or a word after a determiner?"""
    for j in range(1, upto):
        word, lower = words[j], words[j].lower()
        if lower in _EN_PERSONS:
            return True
        if word[:1].isupper() and lower not in ("user", "user's", "i"):
            return True
        prev = words[j - 1].lower()
        if (prev in _EN_DETERMINERS or prev.isdigit() or prev.endswith(("'s", "’s"))) and lower not in _EN_DETERMINERS:
            return True
    return False


def _points_outside(words: list[str], i: int) -> bool:
    """Is English word `i` of a fact a reference to something the fact does not name?"""
    lower = words[i].lower().replace("’", "'")
    after = [w.lower() for w in words[i + 1 : i + 3]]
    before = words[i - 1].lower() if i > 0 else ""
    if lower in _EN_DEMONSTRATIVE:
        return True
    if lower == "there":
        return not after or after[0] not in ("is", "are", "was", "were")
    if lower == "that":
        return not after or before in _EN_THAT_OBJECT
    if lower in _EN_ANAPHORA:
        # "finds it hard to …", "loves it when …": "it" stands for the clause that follows
        expletive = lower == "it" and bool(set(after) & {"to", "that", "when", "whenever", "if"})
        return not expletive and not _named_before(words, i)
    if lower in ("them", "they"):
        # "they"/"them" may be the user ("User wants you to call them Bob"); right after a
        # verb of liking, with nothing named before it, it is the thing liked.
        return before in _EN_VERBS_BEFORE_OBJECT and not _named_before(words, i)
    return False


def dangling_words(content: str) -> list[str]:
    """The words of `content` that point at something the fact does not name."""
    text = unicodedata.normalize("NFKC", content)
    # a person's pronouns are words about words: "User's pronouns are she/her"
    text = re.sub(r"\bpronouns?\b.*$", "", text, flags=_I)
    words = _EN_WORD.findall(text)
    found = [word for i, word in enumerate(words) if _points_outside(words, i)]
    found += [m.group(0) for m in _ZH_ANAPHORA.finditer(text)]
    for m in _ZH_PERSON_PRONOUN.finditer(text):
        if not _ZH_PERSONS.search(text, 0, m.start()):
            found.append(m.group(0))
    return found


# --- grounded ------------------------------------------------------------------------

_HAN = re.compile(r"[\u4e00-\u9fff]")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# The frame a fact is written in, not what it says: never required to be in the evidence.
_EN_FRAME = frozenset(
    """user user's users they them their theirs themselves is are was were be been being has have had does do did
    not no never always often usually also too very really quite much more most prefers prefer preferred likes
    like liked loves love loved enjoys enjoy enjoyed wants want wanted wishes hates hate dislikes dislike
    favorite favourite works work working lives live living uses use using used would should can could will
    may might must to of in on at for with by from as about into over than and or but so that which who whom
    whose what when where why how a an the this these those it its you your yours me my mine we our us i
    standing request requests asks asked answer answers reply replies respond responses response assistant
    currently now still name named called call person someone something thing things kind type sort way ways
    activities activity such especially including like e.g. etc agent agents ai bot model llm""".split()
)
_ZH_FRAME = re.compile(
    r"用户|喜欢|偏好|偏爱|希望|想要|需要|要求|长期|一直|非常|比较|特别|经常|总是|通常|平时|不喜欢|讨厌|以后|今后|"
    r"回答|回复|称呼|名字|正在|目前|现在|最近|还|也|很|都|是|在|的|了|和|与|及|或|被|把|对|给|你|我|他|她"
)


def _script(text: str) -> str:
    han = len(_HAN.findall(text))
    latin = len(re.findall(r"[A-Za-z]", text))
    if not han and not latin:
        return "none"
    return "han" if han >= latin / 4 else "latin"


def _en_stem(word: str) -> str:
    # A light suffix strip, enough to match "hiking"/"hike", "cats"/"cat", "running"/"runs".
    w = word.lower().replace("’", "'").removesuffix("'s")
    for suffix in ("ing", "ers", "ies", "ied", "er", "es", "ed", "s", "ly"):
        if len(w) > len(suffix) + 2 and w.endswith(suffix):
            return w[: -len(suffix)]
    return w


def ungrounded_words(content: str, evidence: str) -> list[str]:
    """What `content` says that the user's quoted words do not: its numbers and names
    not in `evidence`, or (same script) all its content words when none is there."""
    text = unicodedata.normalize("NFKC", content)
    quote = unicodedata.normalize("NFKC", evidence)
    quote_folded = quote.casefold()
    missing = [n for n in _NUMBER.findall(text) if n not in quote]
    script = _script(text)
    # Words can only be compared within one language: a user who wrote any of the other
    # script may have been translated ("我住在柏林" → "User lives in Berlin").
    other = len(_HAN.findall(quote)) >= 2 if script == "latin" else len(re.findall(r"[A-Za-z]{2,}", quote)) >= 3
    if script == "none" or other:
        return missing  # only its numbers can be checked
    if script == "latin":
        words = _EN_WORD.findall(text)
        quote_stems = {_en_stem(w) for w in _EN_WORD.findall(quote)}
        names = [
            w for i, w in enumerate(words) if i > 0 and w[:1].isupper() and w.lower() not in _EN_FRAME and w != "I"
        ]
        missing += [w for w in names if w.casefold() not in quote_folded]
        terms = [w for w in words if w.lower() not in _EN_FRAME and not w[0].isdigit() and len(w) > 2]
        if terms and not any(_en_stem(w) in quote_stems or w.casefold() in quote_folded for w in terms):
            missing += terms
        return missing
    body = _ZH_FRAME.sub(" ", text)
    bigrams = {body[i : i + 2] for i in range(len(body) - 1) if _HAN.match(body[i]) and _HAN.match(body[i + 1])}
    latin = [w for w in re.findall(r"[A-Za-z][A-Za-z0-9+#.]*", text) if len(w) > 1 and w.lower() not in _EN_FRAME]
    missing += [w for w in latin if w.casefold() not in quote_folded]
    if bigrams and not any(b in quote for b in bigrams):
        missing += sorted(bigrams)
    return missing


# --- keys ----------------------------------------------------------------------------

LANGUAGES = (
    r"\b(?:english|chinese|mandarin|cantonese|japanese|korean|french|german|spanish|russian|portuguese|"
    r"italian)\b|中文|英文|英语|汉语|普通话|粤语|日语|日文|韩语|法语|德语|西班牙语|俄语|简体|繁体"
)
_ANSWERS = (
    r"\b(?:answer|answers|answering|repl(?:y|ies|ying)|respon(?:d|ds|ding|se|ses)|explain\w*|explanations?|"
    r"write|writes|writing|speak\w*|talk\w*|communicat\w*|chat\w*|messages?|output)\b|"
    r"回答|回复|答复|解释|讲解|交流|沟通|说话|对话|输出|用.{0,6}(?:说|讲|写)|"
    # what an answer is made of
    r"\b(?:paragraphs?|sentences?|bullet|bullets|summar(?:y|ies)|code|examples?)\b|段落|句子|总结|代码|示例|例子"
)
_LENGTH = (
    r"\b(?:concise|brief|short|shorter|succinct|terse|long|longer|lengthy|detailed|verbose|in-depth|thorough|"
    r"wordy|to the point|length)\b|简洁|简短|简明|精简|详细|啰嗦|冗长|长篇|短一点|短一些|言简意赅|废话|篇幅"
)
_FORMAT = (
    r"\bmarkdown\b|bullet(?:ed)? (?:points|lists?)|\btables?\b|\bheadings?\b|code blocks?|\bformat\w*|"
    r"表格|列表|分点|要点|代码块|格式|标题"
)


def _both(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, _I) for p in patterns)


# A key that names one attribute, and what a fact must mention to be about it (every
# pattern must match). A new active card with the same key replaces the old one, so a
# key given to the wrong statement would silently erase a right fact. Keys not listed
# here are the extractor's own (`pref_<subject>`) and only collide on the same subject.
SINGLE_VALUED: Mapping[str, tuple[re.Pattern[str], ...]] = {
    "name": _both(r"\bname\b|\bcalled\b|名字|姓名|叫"),
    "preferred_name": _both(r"\bcall\w*\b|\bname\b|\bnickname\b|叫|称呼|称为|昵称"),
    "response_language": _both(LANGUAGES, _ANSWERS),
    "code_comment_language": _both(LANGUAGES, r"\bcomments?\b|注释"),
    "commit_message_language": _both(LANGUAGES, r"\bcommit|提交"),
    "response_length": _both(_LENGTH, _ANSWERS + r"|\b(?:answers?|replies|responses?)\b"),
    "response_format": _both(_FORMAT),
    "indentation": _both(r"\btabs?\b|\bspaces\b|\bindent\w*|缩进|制表符"),
    "emoji_usage": _both(r"\bemojis?\b|表情"),
    "units": _both(r"\b(?:metric|imperial|celsius|fahrenheit|units?)\b|公制|英制|摄氏|华氏|单位"),
    "timezone": _both(r"time ?zone|\b(?:utc|gmt|[A-Z]{2,4}T)\b|时区"),
    "location": _both(
        r"\blive[sd]?\b|\bliving\b|\bbased\b|\blocated\b|\bcity\b|\bmoved to\b|住|生活在|定居|常驻|城市|所在地"
    ),
    "hometown": _both(r"\bfrom\b|\bhometown\b|\bgrew up\b|\bborn\b|来自|老家|家乡|出生"),
    "occupation": _both(
        r"\bwork\w*|\bjob\b|\brole\b|\bas an?\b|\bis an?\b|\bprofession\b|\boccupation\b|\btitle\b|职业|工作|岗位|职位|是|做"
    ),
    "employer": _both(
        r"\bwork\w* (?:at|for)\b|\bemployer\b|\bcompany\b|\bjoined\b|\bintern\w*|公司|单位|工作|上班|任职|实习|就职"
    ),
    "native_language": _both(
        LANGUAGES + r"|\bnative\b|\bmother tongue\b|母语", r"native|mother tongue|first language|母语"
    ),
    "birthday": _both(r"\bbirthday\b|\bborn\b|生日|出生"),
    "editor": _both(
        r"\b(?:vim|neovim|nvim|emacs|vs ?code|visual studio code|sublime|intellij|pycharm|goland|webstorm|"
        r"jetbrains|cursor|zed|helix|editor|ide)\b|编辑器"
    ),
    "operating_system": _both(
        r"\b(?:linux|ubuntu|debian|fedora|arch|macos|mac os|mac|windows|wsl|operating system|os)\b|操作系统|系统"
    ),
    "shell": _both(r"\b(?:bash|zsh|fish|powershell|shell)\b"),
}


def key_mismatch(key: str, content: str) -> bool:
    """True when `key` is a single-valued key and `content` is not about its attribute."""
    patterns = SINGLE_VALUED.get(key)
    return patterns is not None and not all(p.search(content) for p in patterns)
