"""The rules reading one Chinese clause: names, grants to act, identity and work, goals,
places, attributes, likes and dislikes, habits, and standing instructions. Returns a
`Statement` or None; the sentence-level labels are applied by the extractor.
"""

from __future__ import annotations

import re

from facts.enums import Authority, Category, Durability
from facts.judging.rules_extractor.keys import (
    ATTRIBUTES,
    PREFERENCE_TOPICS,
    ROLE_WORDS,
    TOOL_TOPICS,
    ZH_ROLE_WORDS,
    key_of,
    slug_of,
    topic_of,
)
from facts.judging.rules_extractor.markers import ZH_DURABLE, ZH_EVENT, ZH_IMPERATIVE, ZH_TEMPORARY
from facts.judging.rules_extractor.statement import LIKELY, SURE, UNSURE, Statement, zh_content, zh_object
from facts.judging.rules_extractor.text import clean
from facts.judging.schemas import normalize_key

_I = re.IGNORECASE


def zh_statement(clause: str) -> Statement | None:
    c = clause
    m = re.match(r"^(?:我的名字(?:是|叫)|我叫)(?P<x>[^了过着]{1,20})$", c)
    if m:
        x = clean(m["x"])
        return Statement(Category.CONTEXT, "name", f"用户的名字是{x}", SURE if len(x) <= 8 else UNSURE)
    m = re.match(
        r"^(?:你)?(?:以后)?(?:可以|就)?(?:请)?(?:都)?(?:叫|称呼|喊)我(?P<x>.{1,12}?)(?:就行了?|就好|就可以了?|吧|好了)?$",
        c,
    )
    if m:
        x = clean(m["x"])
        return Statement(Category.PREFERENCE, "preferred_name", f"用户希望被称为{x}", SURE, standing=True)

    # permissions
    m = re.match(
        r"^(?:以后|今后|从现在开始)?(?:你)?(?:以后)?(?:都)?(?:可以|能|有权限?|随时可以)(?:直接|随时|自己|自行|放心)?(?P<x>.+)|"
        r"^(?:我)?(?:允许|授权|批准)你(?P<y>.+)|^(?P<z>(?:以后)?(?:都)?(?:不用|不需要|无需)(?:再)?(?:问我|征求我的?同意|确认).*)|"
        r"^直接(?P<w>.+?)(?:吧|就行|就好)$",
        c,
    )
    if m:
        x = clean(m["x"] or m["y"] or m["z"] or m["w"] or "")
        if x:
            slug = slug_of(x)
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
        x = clean(m["x"])
        return Statement(Category.CONTEXT, "occupation", f"用户是做{x}的", SURE)
    m = re.match(r"^我是(?P<x>.+)$", c)
    if m:
        x = clean(m["x"])
        if re.match(r"^(?:不是|否|在|说|想|要|觉得|问|因为|为了|来问|刚|第一次)", x):
            return None
        if re.match(r"^(?:来自|从)", x) or re.search(r"^[一-龥]{1,6}人$", x):
            return Statement(Category.CONTEXT, "hometown", f"用户是{x}", LIKELY)
        if re.search(r"新手|初学者|小白|零基础", x):
            subject = re.sub(r"新手|初学者|小白|零基础|的|一[个名位]", "", x)
            return Statement(Category.CONTEXT, normalize_key("familiarity_" + (slug_of(subject) or "general"))[:60], f"用户是{x}", LIKELY)  # fmt: skip
        if ZH_ROLE_WORDS.search(x) or ROLE_WORDS.search(x):
            return Statement(Category.CONTEXT, "occupation", f"用户是{x}", SURE)
        if re.search(r"素食|过敏|色盲|左撇子", x):
            return Statement(Category.CONTEXT, key_of("about", x, topics=()), f"用户是{x}", LIKELY)
        return Statement(Category.CONTEXT, key_of("about", x, topics=()), f"用户是{x}", UNSURE)

    m = re.match(
        r"^我(?:目前|现在)?在(?P<org>[^，,。]{1,24}?)(?P<verb>工作|上班|实习|任职|读书|上学|读研|读博|念书)", c
    )
    if m:
        org = clean(m["org"])
        key = "school" if m["verb"] in ("读书", "上学", "读研", "读博", "念书") else "employer"
        return Statement(Category.CONTEXT, key, f"用户在{org}{m['verb']}", SURE)
    m = re.match(
        r"^我(?:最近|现在|目前|正在|还在|接下来|今年|明年|这几个月|接下来几个月|这段时间)*(?:在)?(?:系统地?|认真|开始)?"
        r"(?:学习|自学|学)(?!校|院|生)(?P<x>.+)",
        c,
    )
    if m:
        x = clean(m["x"])
        if x and not re.match(r"^(?:了|过|会|着|到|完|好|和|与|这个|这段|一下)", x):
            x = zh_object(x) or ""
            if x:
                return Statement(Category.GOAL, normalize_key("learning_" + (slug_of(x) or "general"))[:60], "用户在学" + x, LIKELY)  # fmt: skip
    m = re.match(r"^我(?:最近|现在|目前|正在)*(?:在)?(?:准备|备考|备战)(?P<x>.+)", c)
    if m:
        x = zh_object(m["x"]) or ""
        # "准备去吃晚饭了", "准备出门": what they are about to do, not a goal
        if not x or re.match(r"^(?:去|来|回|出|吃|睡|休息|开始|做|搬|买|看|参加|一下)", x) or x.endswith("了"):
            return None
        if re.match(r"^一[场次个份篇]", x):  # one speech, one interview: an event, not a lasting goal
            statement = Statement(Category.GOAL, normalize_key("preparing_" + (slug_of(x) or "general"))[:60], "用户在准备" + x, LIKELY)  # fmt: skip
            statement.durability = Durability.TEMPORARY
            return statement
        return Statement(Category.GOAL, normalize_key("preparing_" + (slug_of(x) or "general"))[:60], "用户在准备" + x, LIKELY)  # fmt: skip
    m = re.match(r"^我(?:的)?(?:长期)?(?:目标|梦想|理想)是(?P<x>.+)", c) or re.match(r"^我(?:想|希望|打算)(?:以后|将来|未来)?(?:成为|当)(?:一[名个位])?(?P<x>.+)", c)  # fmt: skip
    if m:
        x = clean(m["x"])
        return Statement(Category.GOAL, "long_term_goal", zh_content(c), LIKELY)

    m = re.match(r"^我(?:住在|生活在|定居在|定居|常驻)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "location", "用户住在" + clean(m["x"]), SURE)
    m = re.match(r"^我(?:来自|老家在|老家是)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "hometown", "用户来自" + clean(m["x"]), LIKELY)

    m = re.match(r"^我的(?P<attr>[一-龥A-Za-z ]{1,8}?)是(?P<x>.+)", c)
    if m:
        attr, x = m["attr"].strip(), clean(m["x"])
        fav = re.match(r"^(?:最喜欢的|最爱的|首选的?|常用的|最常用的|默认的?)(?P<what>.+)$", attr)
        if fav:
            what = fav["what"]
            mapped = ATTRIBUTES.get(what, (None, None))[0]
            key = normalize_key("favorite_" + (mapped or topic_of(x, TOOL_TOPICS) or slug_of(what) or "thing"))
            return Statement(Category.PREFERENCE, key[:60], f"用户{attr}是{x}", SURE)
        if attr in ATTRIBUTES:
            key, category = ATTRIBUTES[attr]
            return Statement(category, key, f"用户的{attr}是{x}", SURE)
        return None

    # dislikes before likes
    m = re.match(
        r"^我(?:也|还|很|挺|比较|特别|非常|一直|向来|从来|真的|就|最|实在|可能|也许|大概|好像|或许)*(?P<verb>不太喜欢|不怎么喜欢|不喜欢|讨厌|受不了|"
        r"反感|不习惯|不想看到|不想要|不需要|不爱|烦)(?P<x>.+)",
        c,
    )
    if m:
        x = zh_object(m["x"]) or ""
        if not x or re.match(r"^(?:这个|这段|这种回答|这样|你刚才|刚才)", x):
            return None
        return Statement(Category.PREFERENCE, key_of("pref", x), f"用户{m['verb']}{x}", SURE)
    m = re.match(
        r"^我(?P<adv>(?:也|还|很|挺|比较|更|最|特别|非常|一直|向来|还是|一般|通常|都|真的|就|个人|可能|也许|大概|好像|或许)*)"
        r"(?P<verb>喜欢|偏好|偏爱|倾向于|倾向|习惯|爱|更愿意|愿意|希望|想要|需要|要求)(?P<x>.+)",
        c,
    )
    if m:
        verb, x = m["verb"], clean(re.sub(r"^的是", "", m["x"]))  # "我喜欢的是 Vue"
        if re.match(r"^(?:这个|这段|这种回答|这样|你刚才|刚才|了|过)", x) or not x:
            return None
        fav = re.match(r"^的(?P<what>[^，,。是]{1,10})是(?P<y>.+)$", x)  # "我最喜欢的音乐类型是摇滚"
        if fav and verb in ("喜欢", "爱", "偏爱"):
            y = zh_object(fav["y"])
            if y is None:
                return None
            what = fav["what"]
            key = normalize_key("favorite_" + (slug_of(what) or "thing"))[:60]
            return Statement(Category.PREFERENCE, key, f"用户{m['adv']}{verb}的{what}是{y}", SURE)
        if verb not in ("希望", "想要", "需要", "要求", "愿意"):
            obj = zh_object(x)
            if obj is None:
                return None
            adv = m["adv"]
            return Statement(Category.PREFERENCE, key_of("pref", obj), f"用户{adv}{verb}{obj}", SURE)
        if verb in ("希望", "想要", "需要", "要求", "愿意"):
            if re.search(r"帮我|帮忙|一个|一份|一段|你能|看看|看一下", x) and not ZH_DURABLE.search(x):
                return None  # a task, not a preference
            if not (topic_of(x, PREFERENCE_TOPICS) or ZH_DURABLE.search(x)):
                return None
            return Statement(Category.PREFERENCE, key_of("pref", x), f"用户希望{x}", LIKELY)
        return Statement(Category.PREFERENCE, key_of("pref", x), zh_content(c), SURE)

    m = re.match(
        r"^我(?P<adv>(?:日常工作中?|平时|平常|日常|一般|通常|主要|基本上|基本|工作中|工作上|现在|目前|也)+)(?P<rest>.+)",
        c,
    )
    if m:
        adv, rest = m["adv"], clean(re.sub(r"^(?:就)?是", "", m["rest"]))
        if not re.search(r"平时|平常|日常|一般|通常|主要|基本|工作", adv):
            return None
        if re.match(r"^(?:做|负责|从事|搞|写|开发|在)", rest):
            topic = topic_of(rest, TOOL_TOPICS)
            key = "primary_stack" if topic == "programming_language" else topic or "primary_work"
            return Statement(Category.CONTEXT, key, zh_content(c), SURE)
        if re.match(r"^(?:用|使用)", rest):
            topic = topic_of(rest, TOOL_TOPICS)
            key = "primary_stack" if topic == "programming_language" else topic or key_of("uses", rest, topics=())
            return Statement(Category.CONTEXT, key, zh_content(c), SURE)
        return Statement(Category.CONTEXT, key_of("habit", rest, topics=()), zh_content(c), UNSURE)
    m = re.match(r"^我(?P<verb>负责|从事|的工作是)(?P<x>.+)", c)
    if m:
        return Statement(Category.CONTEXT, "primary_work", zh_content(c), SURE)
    m = re.match(r"^我(?:对|跟)(?P<x>.+?)(?:很|不太|不|比较|非常)?(?P<adj>熟悉|熟|了解|陌生|不熟|过敏)", c)
    if m:
        x = clean(m["x"])
        key = "allergies" if m["adj"] == "过敏" else normalize_key("familiarity_" + (slug_of(x) or "general"))[:60]
        return Statement(Category.CONTEXT, key, zh_content(c), LIKELY)
    m = re.match(r"^我(?:不会|不懂|不太懂|刚开始学|刚学|刚接触)(?P<x>.+)", c)
    if m:
        x = clean(m["x"])
        return Statement(Category.CONTEXT, normalize_key("familiarity_" + (slug_of(x) or "general"))[:60], zh_content(c), LIKELY)  # fmt: skip
    m = re.match(r"^我(?:一直|每天|总是|经常)?(?:用|使用)(?P<x>.+)", c)
    if m:
        x = clean(m["x"])
        topic = topic_of(x, TOOL_TOPICS)
        if topic and not ZH_TEMPORARY.search(x):
            return Statement(Category.CONTEXT, topic, zh_content(c), LIKELY)
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
        when, x = m["when"], clean(m["x"])
        if not x or re.match(r"^(?:再|可能|会|我们再|聊|说吧|的事|有机会)", x):
            return None
        # "却始终保持着…" narrates (a conjunction or a person before it, an aspect marker after
        # the verb); a request has no 着/了 on its verb
        if re.search(r"却|但|而|可是|不过|他|她|它|们", c[: m.start("when")]) or re.match(r"^.{1,3}?[着了过]", x):
            return None
        if x.startswith("我"):
            inner = zh_statement(x)
            if inner is not None:
                inner.standing = True
            return inner
        # "每次运行都会报错" is a bug report, not a standing request: ask for a request.
        # "以后请在回答里附上参考链接": the request may open with where it applies
        action = re.sub(r"^在[^，,。]{1,10}?[里中上时]", "", x)
        requested = "请" in c or "麻烦" in c
        # 一般/通常/平时 also describe the world ("一般用来包装代码"): only a request when asked
        if when in ("平时", "平常", "一般", "通常") and not (requested or topic_of(x, PREFERENCE_TOPICS)):
            return None
        if re.match(r"^(?:用来|用于)", action) or (re.search(r"是|其实", x) and not requested):
            return None
        if not (
            requested or ZH_IMPERATIVE.match(action) or (topic_of(x, PREFERENCE_TOPICS) and not ZH_EVENT.search(x))
        ):
            return None
        x = re.sub(r"请|麻烦", "", x)
        content = f"用户希望{when}{x}" if m.start("when") == 0 else "用户希望" + re.sub(r"请|麻烦", "", clean(c))
        return Statement(Category.PREFERENCE, key_of("pref", x), content.replace("我", "用户"), SURE, standing=True)
    m = re.match(r"^(?:请)?(?:你)?(?:千万)?(?P<neg>不要再|别再|再也不要|永远不要|不要|别)(?P<x>.+)", c)
    if m:
        x = clean(m["x"])
        if m["neg"] in ("不要再", "别再", "再也不要", "永远不要"):
            # "别再…" asks for a lasting change, whatever it is about
            x = re.sub(r"了$", "", x)
            return Statement(Category.PREFERENCE, key_of("pref", x), f"用户希望你不要再{x}".replace("我", "用户"), LIKELY, standing=True)  # fmt: skip
        return None  # a plain "不要用X" is judged as an imperative (`_imperative`)
    return None
