// Receipts of the main job (receipt.h): what write_and_check_receipt writes is the stable schema
// (top-level fields, row fields, shape as an object, CSV columns), numbers re-read exactly, and
// a file that cannot be written is an error naming it. CPU only.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "receipt.h"

namespace ropenorm::bench {
namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/ropenorm-receipt-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d != nullptr ? std::string(d) : std::string();
}

Receipt sample() {
  Receipt r;
  r.device = "Test Device";
  r.driver = "1.2";
  r.cuda = "13.0";
  r.commit = "abc1234";
  r.date = "2026-12-01T00:00:00Z";
  r.copy_bandwidth_gbps = 4221.347164258298;
  r.launch_floor_us = 0.7784000132232904;
  ResultRow a;
  a.op = "rms_norm";
  a.impl = "ropenorm";
  a.dtype = "bf16";
  a.shape = {{"M", 4096}, {"N", 4096}};
  a.timing = "cold_l2";
  a.median_us = 1.0 / 3.0;
  a.min_us = 0.25;
  a.max_us = 0.5;
  a.samples = 21;
  a.bytes = 67108864;
  a.gbps = 3251.8;
  a.pct_of_copy = 77.9;
  a.copy_floor_us = 16.123456789012345;
  a.max_err_ulp = 1;
  a.tol_ulp = 1;
  a.frac_exact = 0.99999;
  a.passed = true;
  ResultRow b = a;
  b.impl = "unfused";
  b.timing = "cuda_graph";
  b.passed = false;
  b.note = "3 launches, one rounding each";
  r.results = {a, b};
  return r;
}

TEST(CpuReceipt, SchemaFieldsAndExactNumbers) {
  const std::string dir = temp_dir();
  ASSERT_FALSE(dir.empty());
  const Receipt r = sample();
  const Status st = write_and_check_receipt(r, dir + "/bench-test");
  ASSERT_TRUE(st.ok()) << st.message();

  std::ifstream jf(dir + "/bench-test.json");
  const nlohmann::json j = nlohmann::json::parse(jf);
  for (const char* key : {"device", "driver", "cuda", "torch", "commit", "date",
                          "copy_bandwidth_gbps", "launch_floor_us", "results"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["commit"], "abc1234");
  EXPECT_EQ(j["copy_bandwidth_gbps"].get<double>(), r.copy_bandwidth_gbps);
  EXPECT_EQ(j["launch_floor_us"].get<double>(), r.launch_floor_us);
  ASSERT_EQ(j["results"].size(), 2u);
  const nlohmann::json& row = j["results"][0];
  for (const char* key : {"op", "impl", "dtype", "shape", "timing", "median_us", "min_us", "max_us",
                          "gbps", "copy_floor_us", "max_err_ulp", "passed"}) {
    EXPECT_TRUE(row.contains(key)) << key;
  }
  EXPECT_TRUE(row["shape"].is_object());
  EXPECT_EQ(row["shape"]["M"], 4096);
  EXPECT_EQ(row["shape"]["N"], 4096);
  EXPECT_EQ(row["median_us"].get<double>(), 1.0 / 3.0);  // bit for bit
  EXPECT_EQ(row["copy_floor_us"].get<double>(), r.results[0].copy_floor_us);
  EXPECT_EQ(j["results"][1]["timing"], "cuda_graph");
  EXPECT_FALSE(j["results"][1]["passed"].get<bool>());

  std::ifstream cf(dir + "/bench-test.csv");
  std::string header, line1, line2, extra;
  ASSERT_TRUE(std::getline(cf, header));
  EXPECT_EQ(header.rfind("op,impl,dtype,shape,timing,median_us,", 0), 0u) << header;
  ASSERT_TRUE(std::getline(cf, line1));
  ASSERT_TRUE(std::getline(cf, line2));
  EXPECT_FALSE(std::getline(cf, extra));
  EXPECT_NE(line1.find(",M=4096;N=4096,cold_l2,"), std::string::npos) << line1;
  // The note's comma cannot split a CSV cell.
  EXPECT_NE(line2.find("3 launches; one rounding each"), std::string::npos) << line2;
  std::filesystem::remove_all(dir);
}

TEST(CpuReceipt, UnwritablePathIsAnErrorNamingIt) {
  const Receipt r = sample();
  const std::string stem = "/nonexistent-ropenorm-dir/sub/bench-test";
  const Status st = write_and_check_receipt(r, stem);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(stem + ".json"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ropenorm::bench
