#include "template/strftime.h"

#include <cstdio>

namespace ubatch::jinja {

namespace {

constexpr const char* kDays[] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"};
constexpr const char* kMonths[] = {"January", "February", "March",     "April",   "May",      "June",
                                   "July",    "August",   "September", "October", "November", "December"};

// Days since 1970-01-01 of a civil date (H. Hinnant's days_from_civil).
long days_from_civil(long y, unsigned m, unsigned d) {
  y -= m <= 2;
  const long era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<long>(doe) - 719468;
}

// ISO 8601 week number and week-based year.
int iso_weeks_in(int y) {
  auto p = [](int x) { return (x + x / 4 - x / 100 + x / 400) % 7; };
  return 52 + ((p(y) == 4 || p(y - 1) == 3) ? 1 : 0);
}

void iso_week(const std::tm& t, int& week, int& year) {
  year = t.tm_year + 1900;
  const int wday = (t.tm_wday + 6) % 7;  // Monday = 0
  week = (t.tm_yday - wday + 10) / 7;
  if (week < 1) {
    --year;
    week = iso_weeks_in(year);
  } else if (week > iso_weeks_in(year)) {
    ++year;
    week = 1;
  }
}

std::string num(long v, int width, char pad_flag, char default_pad) {
  const char pad = pad_flag == '-' ? 0 : pad_flag == '_' ? ' ' : pad_flag == '0' ? '0' : default_pad;
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out = v < 0 ? "-" : "";
  if (pad) {
    for (int i = static_cast<int>(digits.size()); i < width; ++i) out += pad;
  }
  return out + digits;
}

}  // namespace

std::tm make_date(int year, int month, int day, int hour, int minute, int second) {
  std::tm t{};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = hour;
  t.tm_min = minute;
  t.tm_sec = second;
  const long days = days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  t.tm_wday = static_cast<int>(((days % 7) + 11) % 7);  // 1970-01-01 was a Thursday
  t.tm_yday = static_cast<int>(days - days_from_civil(year, 1, 1));
  return t;
}

std::string py_strftime(const std::tm& t, std::string_view fmt) {
  std::string out;
  const int year = t.tm_year + 1900;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%' || i + 1 >= fmt.size()) {
      out += fmt[i];
      continue;
    }
    const size_t start = i;
    char flag = 0;
    ++i;
    if (fmt[i] == '-' || fmt[i] == '_' || fmt[i] == '0' || fmt[i] == '^' || fmt[i] == '#') {
      flag = fmt[i];
      ++i;
      if (i >= fmt.size()) {
        out += fmt.substr(start);
        break;
      }
    }
    std::string piece;
    const int hour12 = t.tm_hour % 12 == 0 ? 12 : t.tm_hour % 12;
    switch (fmt[i]) {
      case 'a': piece = std::string(kDays[t.tm_wday]).substr(0, 3); break;
      case 'A': piece = kDays[t.tm_wday]; break;
      case 'b':
      case 'h': piece = std::string(kMonths[t.tm_mon]).substr(0, 3); break;
      case 'B': piece = kMonths[t.tm_mon]; break;
      case 'c':
        piece = py_strftime(t, "%a %b ") + num(t.tm_mday, 2, 0, ' ') + py_strftime(t, " %H:%M:%S %Y");
        break;
      case 'C': piece = num(year / 100, 2, flag, '0'); break;
      case 'd': piece = num(t.tm_mday, 2, flag, '0'); break;
      case 'D': piece = py_strftime(t, "%m/%d/%y"); break;
      case 'e': piece = num(t.tm_mday, 2, flag, ' '); break;
      case 'f': piece = "000000"; break;
      case 'F': piece = py_strftime(t, "%Y-%m-%d"); break;
      case 'G':
      case 'g':
      case 'V': {
        int w, y;
        iso_week(t, w, y);
        piece = fmt[i] == 'V' ? num(w, 2, flag, '0') : fmt[i] == 'G' ? num(y, 0, flag, '0') : num(y % 100, 2, flag, '0');
        break;
      }
      case 'H': piece = num(t.tm_hour, 2, flag, '0'); break;
      case 'I': piece = num(hour12, 2, flag, '0'); break;
      case 'j': piece = num(t.tm_yday + 1, 3, flag, '0'); break;
      case 'k': piece = num(t.tm_hour, 2, flag, ' '); break;
      case 'l': piece = num(hour12, 2, flag, ' '); break;
      case 'm': piece = num(t.tm_mon + 1, 2, flag, '0'); break;
      case 'M': piece = num(t.tm_min, 2, flag, '0'); break;
      case 'n': piece = "\n"; break;
      case 'p': piece = t.tm_hour < 12 ? "AM" : "PM"; break;
      case 'r': piece = py_strftime(t, "%I:%M:%S %p"); break;
      case 'R': piece = py_strftime(t, "%H:%M"); break;
      case 'S': piece = num(t.tm_sec, 2, flag, '0'); break;
      case 't': piece = "\t"; break;
      case 'T': piece = py_strftime(t, "%H:%M:%S"); break;
      case 'u': piece = num(t.tm_wday == 0 ? 7 : t.tm_wday, 1, flag, '0'); break;
      case 'U': piece = num((t.tm_yday + 7 - t.tm_wday) / 7, 2, flag, '0'); break;
      case 'w': piece = num(t.tm_wday, 1, flag, '0'); break;
      case 'W': piece = num((t.tm_yday + 7 - (t.tm_wday + 6) % 7) / 7, 2, flag, '0'); break;
      case 'x': piece = py_strftime(t, "%m/%d/%y"); break;
      case 'X': piece = py_strftime(t, "%H:%M:%S"); break;
      case 'y': piece = num(year % 100, 2, flag, '0'); break;
      case 'Y': piece = num(year, 0, flag, '0'); break;
      case 'z':
      case 'Z': piece = ""; break;
      case '%': piece = "%"; break;
      default: piece = std::string(fmt.substr(start, i - start + 1)); break;
    }
    if (flag == '^' || flag == '#')
      for (char& c : piece) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
    out += piece;
  }
  return out;
}

}  // namespace ubatch::jinja
