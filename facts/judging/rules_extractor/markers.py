"""The words that label a statement rather than say it.

Discourse openers and corrections (stripped before a clause is read), one-off and
standing markers ("this time" / "always", "这次" / "以后"), hedges, hypotheticals,
questions and requests to the assistant, in English and Chinese. `strip_leads` and the
question tests live here because they only look at these words.
"""

from __future__ import annotations

import re

from facts.judging.rules_extractor.text import clean

_I = re.IGNORECASE

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

EN_TEMPORARY = re.compile(
    r"\b(?:this time|just this once|this once|for now|for the moment|at the moment|right now|today|"
    r"tonight|tomorrow|temporarily|"
    r"(?:just )?(?:for|in) (?:this|that) (?:answer|reply|response|question|one|task|conversation|chat|thread|"
    r"session|message|function|file|snippet|bug|case|example|draft|email|pr|commit)|"
    r"this (?:answer|reply|response|question|task|week|morning|afternoon|evening)|"
    r"for the rest of (?:this|the) (?:conversation|chat|session|thread)|for (?:today|tonight|a while)|"
    r"until (?:tomorrow|tonight|the end of (?:the|this) (?:day|week|chat|conversation)))\b",
    _I,
)
ZH_TEMPORARY = re.compile(
    r"这次|这一次|本次|这回|这一回|今天|今晚|明天|现在先|暂时|临时|先[^，。,]{0,12}吧|这个问题|这道题|"
    r"这段代码|这个函数|这个文件|这一段|这篇|这个回答|这条回复|刚才|这轮|本轮|这会儿|目前先|眼下|这周|本周"
)
EN_DURABLE_WORDS = (
    r"always|never|from now on|going forward|in (?:the )?future|from here on(?: out)?|henceforth|"
    r"by default|in general|generally|every time|each time|whenever|all the time|as a rule|"
    r"for all (?:future )?(?:answers|replies|responses|code)|any time|anytime"
)
EN_DURABLE = re.compile(rf"\b(?:{EN_DURABLE_WORDS})\b", _I)
ZH_DURABLE = re.compile(
    r"以后|今后|往后|之后都|从现在开始|从现在起|从今以后|从今往后|下次|每次|始终|一直|总是|永远|默认|一律|"
    r"统一|平时|平常|日常|一般|通常|长期|所有的?回答|任何时候"
)
EN_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|probably|i think|i guess|i suppose|sometimes|occasionally|kind of|sort of|"
    r"might|not sure|possibly|i'm not sure|depends)\b",
    _I,
)
ZH_HEDGE = re.compile(r"可能|也许|大概|好像|似乎|有时候|有时|偶尔|说不定|不一定|看情况|或许|不确定")
EN_HYPOTHETICAL = re.compile(
    r"^(?:if|suppose|supposing|imagine|assuming|assume|what if|let's say|say|pretend|in case|unless|"
    r"when i was|back when|i used to|i once|i was|i had|i wonder|i heard|they say|he|she|they|"
    r"my (?:friend|colleague|coworker|co-worker|boss|manager|wife|husband|partner|son|daughter|mom|mother|"
    r"dad|father|brother|sister|teammate|team mate|client|customer|user|kid|kids|cat|dog)s?\b)\b",
    _I,
)
ZH_HYPOTHETICAL = re.compile(
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


def is_question(sentence: str) -> bool:
    text = sentence.rstrip()
    if text.endswith(("?", "？")):
        return True
    if _ZH_QUESTION_END.search(text):
        return True
    head = _EN_LEAD.sub("", text)
    return bool(_EN_QUESTION_START.match(head))


def asks(clause: str) -> bool:
    piece = clean(strip_leads(clean(clause))[0])
    return bool(_EN_QUESTION_START.match(piece) or _ZH_QUESTION_WORDS.search(piece))


def strip_leads(text: str) -> tuple[str, int, bool, bool]:
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


EN_IMPERATIVE = re.compile(
    r"^(?:please\s+)?(?:answer|reply|respond|write|explain|use|give|show|keep|add|include|avoid|put|format|"
    r"speak|talk|make|be|stop|start|skip|stick to|go with|default to|don't|do not|switch to|translate|"
    r"comment|name|indent|add)\b",
    _I,
)
ZH_IMPERATIVE = re.compile(
    r"^(?:请|麻烦|用|给|写|回答|解释|回复|保持|加上|加|不要|别|多用|少用|多|少|先|说|讲|尽量|统一|都用|使用|采用|附上|"
    r"带上|换成|改用|翻译|注释)"
)
EN_TEMPORARY_PREFIX = re.compile(
    r"^(?:just\s+)?(?:this time|this once|just this once|for now|today|right now|tonight)\s*,?\s*", _I
)
ZH_TEMPORARY_PREFIX = re.compile(r"^(?:这次|这一次|本次|这回|今天|今晚|现在|暂时|临时)(?:先|就|请|都|也|麻烦|的话)*")


ZH_EVENT = re.compile(r"会|报错|出错|失败|崩溃|卡住|超时|返回")
