"""Filler text in scripts other than Latin, for fingerprint tests and the near-duplicate set.

Each language has a small vocabulary of real words (nouns, particles, verb endings), drawn
with Zipf weights like :data:`testweb.model.WORDS` text, and is written as the script is:
Chinese and Japanese without any spaces (sentences end in "。"), Thai without spaces
between words but with a space between sentences, Korean and Arabic with spaces between
words. Pure functions of ``(language, seed, sentences)``.

A narrow vocabulary is the hard case for a fingerprint: two texts drawn from it share all
their frequent short character sequences, which is how pages of one site in one language
look to character n-grams. Thirteen-hundred sentences of Japanese from here were 1-4 SimHash
bits apart under the frequency-weighted character trigrams of an earlier
:mod:`cycles.fingerprint` (GitHub issue #13, section 3).
"""

from __future__ import annotations

import random

_JA_NOUNS = ("東京 日本 会社 政府 経済 市場 技術 研究 大学 学生 先生 病院 医者 天気 季節 料理 旅行 "
             "電車 駅 映画 音楽 写真 新聞 記事 情報 問題 結果 会議 計画 予算 社会 文化 歴史 言葉 時間 "
             "世界 地域 住民 子ども 家族 友達 仕事 環境 エネルギー コンピューター インターネット "
             "サービス システム データ ソフトウェア デザイン ニュース スポーツ サッカー 野球 選手 試合 "
             "大会 記録").split()
_JA_PARTICLES = "は が を に で と も の から まで".split()
_JA_ENDINGS = ("です。 ます。 ました。 しています。 されました。 と考えています。 を発表しました。 "
               "が増えています。 について説明しました。 になりました。 と話しました。 を行いました。").split()

_ZH_WORDS = ("中国 北京 上海 政府 经济 市场 技术 研究 大学 学生 老师 医院 医生 天气 季节 食物 旅行 "
             "火车 车站 电影 音乐 照片 报纸 文章 信息 问题 结果 会议 计划 预算 社会 文化 历史 语言 "
             "时间 世界 地区 居民 孩子 家庭 朋友 工作 环境 能源 电脑 互联网 服务 系统 数据 软件 设计 "
             "新闻 体育 足球 比赛 的 了 在 是 我们 他们 发展 表示 认为 进行 已经 可以 这个 一个 没有 和").split()

_TH_WORDS = ("ประเทศ ไทย รัฐบาล เศรษฐกิจ การศึกษา โรงเรียน นักเรียน ครู มหาวิทยาลัย โรงพยาบาล แพทย์ "
             "อากาศ ฝน ร้อน อาหาร อร่อย การเดินทาง รถไฟ สถานี ภาพยนตร์ ดนตรี ข่าว ข้อมูล ปัญหา ผลลัพธ์ "
             "การประชุม แผน งบประมาณ สังคม วัฒนธรรม ประวัติศาสตร์ ภาษา เวลา โลก ชุมชน ครอบครัว เพื่อน "
             "งาน สิ่งแวดล้อม พลังงาน คอมพิวเตอร์ อินเทอร์เน็ต บริการ ระบบ กีฬา ฟุตบอล นักกีฬา "
             "การแข่งขัน ที่ และ ของ ใน ได้ มี เป็น จะ ว่า ให้ กับ การ ไม่ แล้ว").split()

_KO_WORDS = ("한국 서울 정부 경제 시장 기술 연구 대학 학생 선생님 병원 의사 날씨 계절 음식 여행 기차 역 "
             "영화 음악 사진 신문 기사 정보 문제 결과 회의 계획 예산 사회 문화 역사 언어 시간 세계 지역 "
             "주민 아이 가족 친구 일 환경 에너지 컴퓨터 인터넷 서비스 시스템 데이터 뉴스 스포츠 축구 "
             "선수 경기 는 이 가 을 를 에서 했다 합니다 있습니다 되었다 발표했다 말했다").split()

_AR_WORDS = ("مصر القاهرة الحكومة الاقتصاد السوق التكنولوجيا البحث الجامعة الطالب المعلم المستشفى "
             "الطبيب الطقس الموسم الطعام السفر القطار المحطة الفيلم الموسيقى الصورة الصحيفة المقال "
             "المعلومات المشكلة النتيجة الاجتماع الخطة الميزانية المجتمع الثقافة التاريخ اللغة الوقت "
             "العالم المنطقة السكان الأطفال العائلة الأصدقاء العمل البيئة الطاقة الحاسوب الإنترنت "
             "الخدمة النظام البيانات الأخبار الرياضة كرة اللاعب المباراة في من على إلى عن مع هذا التي "
             "الذي قال أعلن").split()

LANGUAGES = ("ja", "zh", "th", "ko", "ar")
"""Languages :func:`text` writes."""

DATE_LINES = {
    "ja": ("2024年3月12日更新", "2025年1月7日更新"),
    "zh": ("2024年3月12日更新", "2025年1月7日更新"),
    "th": ("ปรับปรุงเมื่อ 12 มีนาคม 2567", "ปรับปรุงเมื่อ 7 มกราคม 2568"),
    "ko": ("2024년 3월 12일 수정", "2025년 1월 7일 수정"),
    "ar": ("تم التحديث في 12 مارس 2024", "تم التحديث في 7 يناير 2025"),
}
"""Two date lines per language: a page and its copy with another date are near-duplicates."""


def _zipf(vocabulary: list[str]) -> list[float]:
    return [1 / (rank + 1) for rank in range(len(vocabulary))]


def _sentence(rng: random.Random, language: str) -> str:
    if language == "ja":
        nouns = rng.choices(_JA_NOUNS, _zipf(_JA_NOUNS), k=rng.randint(2, 5))
        return "".join(noun + rng.choice(_JA_PARTICLES) for noun in nouns) + rng.choice(_JA_ENDINGS)
    vocabulary = {"zh": _ZH_WORDS, "th": _TH_WORDS, "ko": _KO_WORDS, "ar": _AR_WORDS}[language]
    words = rng.choices(vocabulary, _zipf(vocabulary), k=rng.randint(6, 14))
    if language == "zh":
        return "".join(words) + "。"
    if language == "th":
        return "".join(words)
    return " ".join(words) + "."


def sentences(language: str, seed: int, count: int) -> list[str]:
    """``count`` sentences of ``language`` (one of :data:`LANGUAGES`)."""
    rng = random.Random(f"{language}:{seed}")
    return [_sentence(rng, language) for _ in range(count)]


def join(language: str, parts: list[str]) -> str:
    """Sentences (or paragraphs) put together as the script writes them."""
    return ("" if language in ("ja", "zh") else " ").join(parts)


def text(language: str, seed: int, count: int = 60) -> str:
    """A text of ``count`` sentences."""
    return join(language, sentences(language, seed, count))
