"""The one shape of an "unknown key" message, whichever of our YAML formats the key was in."""

from __future__ import annotations

from exporter.safeyaml import LISTED_KEYS_MAX, unknown_key


def test_a_short_list_of_keys_is_shown_whole_and_sorted() -> None:
    assert unknown_key("colour", ["seed", "driver", "description"]) == \
        "unknown key (known keys: description, driver, seed)"


def test_a_long_list_offers_the_closest_names_and_where_the_rest_are() -> None:
    known = [f"nvmlDeviceGet{name}" for name in ("FanSpeed", "Brand", "Name", "Serial", "Index", "UUID", "Count",
                                                   "PowerUsage", "Temperature", "MemoryInfo", "PciInfo", "Clock",
                                                   "MinorNumber")]
    assert len(known) > LISTED_KEYS_MAX
    message = unknown_key("nvmlDeviceGetFanSpeedy", known, "see the README")
    assert message.startswith("unknown key (did you mean nvmlDeviceGetFanSpeed")
    assert message.endswith("; see the README)")
    assert "nvmlDeviceGetPciInfo" not in message  # not the whole list


def test_a_long_list_with_nothing_close_says_so_in_one_short_line() -> None:
    known = [f"key{index:02d}" for index in range(40)]
    assert unknown_key("zzzzzz", known) == "unknown key (none of the 40 known keys is close)"
