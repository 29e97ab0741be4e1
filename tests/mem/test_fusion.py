from __future__ import annotations

from harness_mem.fusion import Candidate, fuse, query_words, strip_names


def test_strip_names_removes_names_and_possessives() -> None:
    assert strip_names("What did Caroline's sister tell caroline?", ["Caroline"]) == "What did sister tell ?"
    assert strip_names("Caroline", ["Caroline"]) == "Caroline"  # nothing would be left: keep the query
    assert strip_names("what about users", ["user"]) == "what about users"  # whole words only
    assert strip_names("no names here", []) == "no names here"


def test_query_words_are_lowercased_and_unique() -> None:
    assert query_words("Did Mel and mel's MEL go?") == ["did", "mel", "and", "s", "go"]


def test_keyword_and_cosine_combine_and_priors_reorder() -> None:
    plain = [
        Candidate(1, keyword=10.0, cosine=0.2, named=False, session="a"),
        Candidate(2, keyword=0.0, cosine=0.6, named=False, session="b"),
    ]
    # 1: .3 * 1 + .7 * .2 = .44 (+ .5 * .44); 2: .7 * .6 = .42 (+ .5 * .42)
    assert [pk for pk, _ in fuse(plain, 2)] == [1, 2]
    named = [plain[0], Candidate(2, keyword=0.0, cosine=0.6, named=True, session="b")]
    assert [pk for pk, _ in fuse(named, 2)] == [2, 1]  # the speaker the question names comes first


def test_session_prior_lifts_the_neighbours_of_a_strong_hit() -> None:
    candidates = [
        Candidate(1, keyword=10.0, cosine=0.9, named=False, session="s1"),  # strong hit
        Candidate(2, keyword=0.0, cosine=0.30, named=False, session="s1"),  # its session-mate
        Candidate(3, keyword=0.0, cosine=0.35, named=False, session="s2"),  # alone in its session
    ]
    assert [pk for pk, _ in fuse(candidates, 3)] == [1, 2, 3]
    assert fuse([], 3) == []
