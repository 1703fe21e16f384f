// Benchmark receipts (see receipt.h): nlohmann::json for JSON, a plain comma-separated CSV with
// a header line; numbers printed with 17 significant digits so they re-read exactly.
#include "receipt.h"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace ropenorm::bench {

namespace {

using nlohmann::json;

const char* const kCsvColumns[] = {
    "op",      "impl",       "dtype",  "shape", "timing",      "median_us",     "min_us",
    "max_us",  "samples",    "bytes",  "gbps",  "pct_of_copy", "copy_floor_us", "max_err_ulp",
    "tol_ulp", "frac_exact", "passed", "note"};

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string shape_str(const ResultRow& r) {
  std::string s;
  for (const auto& kv : r.shape)
    s += (s.empty() ? "" : ";") + kv.first + "=" + std::to_string(kv.second);
  return s;
}

json row_json(const ResultRow& r) {
  json shape = json::object();
  for (const auto& kv : r.shape) shape[kv.first] = kv.second;
  return json{{"op", r.op},
              {"impl", r.impl},
              {"dtype", r.dtype},
              {"shape", shape},
              {"timing", r.timing},
              {"median_us", r.median_us},
              {"min_us", r.min_us},
              {"max_us", r.max_us},
              {"samples", r.samples},
              {"bytes", r.bytes},
              {"gbps", r.gbps},
              {"pct_of_copy", r.pct_of_copy},
              {"copy_floor_us", r.copy_floor_us},
              {"max_err_ulp", r.max_err_ulp},
              {"tol_ulp", r.tol_ulp},
              {"frac_exact", r.frac_exact},
              {"passed", r.passed},
              {"note", r.note}};
}

std::vector<std::string> csv_row(const ResultRow& r) {
  return {r.op,
          r.impl,
          r.dtype,
          shape_str(r),
          r.timing,
          num(r.median_us),
          num(r.min_us),
          num(r.max_us),
          std::to_string(r.samples),
          std::to_string(r.bytes),
          num(r.gbps),
          num(r.pct_of_copy),
          num(r.copy_floor_us),
          num(r.max_err_ulp),
          num(r.tol_ulp),
          num(r.frac_exact),
          r.passed ? "true" : "false",
          r.note};
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : line) {
    if (ch == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

Status mismatch(const std::string& file, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "receipt check: " + file + ": " + what);
}

}  // namespace

Status write_and_check_receipt(const Receipt& r, const std::string& stem) {
  const std::string jpath = stem + ".json", cpath = stem + ".csv";
  json j{{"device", r.device},
         {"driver", r.driver},
         {"cuda", r.cuda},
         {"torch", r.torch},
         {"commit", r.commit},
         {"date", r.date},
         {"copy_bandwidth_gbps", r.copy_bandwidth_gbps},
         {"launch_floor_us", r.launch_floor_us},
         {"results", json::array()}};
  for (const ResultRow& row : r.results) j["results"].push_back(row_json(row));
  {
    std::ofstream f(jpath);
    if (!f) return mismatch(jpath, "cannot open for writing");
    f << j.dump(1) << "\n";
  }
  {
    std::ofstream f(cpath);
    if (!f) return mismatch(cpath, "cannot open for writing");
    bool first = true;
    for (const char* c : kCsvColumns) {
      f << (first ? "" : ",") << c;
      first = false;
    }
    f << "\n";
    for (const ResultRow& row : r.results) {
      const auto cells = csv_row(row);
      for (size_t i = 0; i < cells.size(); ++i) {
        // Commas never occur in the cells (shape uses ';'); guard notes anyway.
        std::string c = cells[i];
        for (char& ch : c) ch = ch == ',' ? ';' : ch;
        f << (i ? "," : "") << c;
      }
      f << "\n";
    }
  }

  // Re-read JSON.
  json back;
  try {
    std::ifstream f(jpath);
    back = json::parse(f);
  } catch (const std::exception& e) {
    return mismatch(jpath, std::string("does not parse: ") + e.what());
  }
  for (const char* key : {"device", "driver", "cuda", "commit", "copy_bandwidth_gbps",
                          "launch_floor_us", "results"}) {
    if (!back.contains(key)) return mismatch(jpath, std::string("missing field ") + key);
  }
  if (back["device"] != r.device || back["commit"] != r.commit ||
      back["copy_bandwidth_gbps"].get<double>() != r.copy_bandwidth_gbps ||
      back["launch_floor_us"].get<double>() != r.launch_floor_us) {
    return mismatch(jpath, "header fields differ from what was written");
  }
  if (back["results"].size() != r.results.size()) {
    return mismatch(jpath, "row count " + std::to_string(back["results"].size()) +
                               " != " + std::to_string(r.results.size()));
  }
  for (size_t i = 0; i < r.results.size(); ++i) {
    if (back["results"][i] != row_json(r.results[i])) {
      return mismatch(jpath, "row " + std::to_string(i) + " differs after re-reading");
    }
  }

  // Re-read CSV.
  std::ifstream f(cpath);
  std::string line;
  if (!std::getline(f, line)) return mismatch(cpath, "empty");
  const auto header = split_csv(line);
  if (header.size() != sizeof(kCsvColumns) / sizeof(kCsvColumns[0])) {
    return mismatch(cpath, "header has " + std::to_string(header.size()) + " columns");
  }
  size_t rows = 0;
  while (std::getline(f, line)) {
    if (rows >= r.results.size()) return mismatch(cpath, "more rows than written");
    const auto cells = split_csv(line);
    const auto expect = csv_row(r.results[rows]);
    if (cells.size() != expect.size())
      return mismatch(cpath, "row " + std::to_string(rows) + " column count");
    for (size_t c = 0; c + 1 < expect.size(); ++c) {  // the note may have had commas replaced
      if (cells[c] != expect[c]) {
        return mismatch(cpath, "row " + std::to_string(rows) + " column " + header[c] + ": '" +
                                   cells[c] + "' != '" + expect[c] + "'");
      }
    }
    if (std::stod(cells[5]) != r.results[rows].median_us) {
      return mismatch(cpath, "row " + std::to_string(rows) + " median_us does not re-read exactly");
    }
    ++rows;
  }
  if (rows != r.results.size()) return mismatch(cpath, "row count " + std::to_string(rows));
  return Status::Ok();
}

}  // namespace ropenorm::bench
