// Device inventory and exclusive attach. Each test gets its own lock
// directory so tests never see each other's (or a real user's) IPUs.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "neurenix/device.h"
#include "test_util.h"

namespace {

using namespace neurenix;
using namespace nxtest;

void remove_tree(const std::string& path) {
  DIR* d = opendir(path.c_str());
  if (d) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string p = path + "/" + n;
      struct stat st;
      if (lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(p);
      else unlink(p.c_str());
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/neurenix-device-test-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    ASSERT_NE(mkdtemp(buf.data()), nullptr);
    dir_ = buf.data();
  }
  void TearDown() override { remove_tree(dir_); }

  SystemSpec system(uint32_t ipus) { return tiny(4, ipus); }
  std::string file_text(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  std::string dir_;
};

// gc-info's numbering: singles, then pairs, fours, ... each in IPU order.
std::vector<DeviceInfo> expected_devices(uint32_t n) {
  std::vector<DeviceInfo> out;
  uint32_t id = 0;
  for (uint32_t size = 1; size <= n; size *= 2)
    for (uint32_t start = 0; start + size <= n; start += size) {
      DeviceInfo d{id++, {}};
      for (uint32_t i = 0; i < size; ++i) d.ipus.push_back(start + i);
      out.push_back(d);
    }
  return out;
}

TEST_F(DeviceTest, InventoryNumbersGroupsLikeGcInfo) {
  DeviceManager m16(system(16), dir_);
  const auto& d = m16.devices();
  ASSERT_EQ(d.size(), 31u);  // 16 + 8 + 4 + 2 + 1
  EXPECT_EQ(d[0].ipus, (std::vector<uint32_t>{0}));
  EXPECT_EQ(d[15].ipus, (std::vector<uint32_t>{15}));
  EXPECT_EQ(d[16].ipus, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(d[23].ipus, (std::vector<uint32_t>{14, 15}));
  EXPECT_EQ(d[24].ipus, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(d[28].ipus.size(), 8u);
  EXPECT_EQ(d[30].ipus.size(), 16u);
  for (uint32_t n : {1u, 2u, 3u, 6u, 8u, 16u}) {
    DeviceManager m(system(n), dir_);
    auto want = expected_devices(n);
    ASSERT_EQ(m.devices().size(), want.size()) << n;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(m.devices()[i].id, i);
      EXPECT_EQ(m.devices()[i].ipus, want[i].ipus) << n << " " << i;
    }
  }
  EXPECT_EQ(m16.lock_dir(), dir_);
  EXPECT_EQ(m16.spec().num_ipus, 16u);
}

TEST_F(DeviceTest, AttachTakesFirstFreeGroupOfEachPowerOfTwo) {
  DeviceManager m(system(8), dir_);
  auto a = m.attach(1, std::nullopt, 0);
  EXPECT_EQ(a->id(), 0u);
  EXPECT_EQ(a->ipus(), (std::vector<uint32_t>{0}));
  EXPECT_TRUE(a->attached());
  auto b = m.attach(1, std::nullopt, 0);
  EXPECT_EQ(b->id(), 1u);
  // Pairs: {0,1} is busy, so {2,3} (id 9).
  auto p = m.attach(2, std::nullopt, 0);
  EXPECT_EQ(p->id(), 9u);
  EXPECT_EQ(p->ipus(), (std::vector<uint32_t>{2, 3}));
  // Fours: {0..3} busy, {4..7} free (id 13).
  auto f = m.attach(4, std::nullopt, 0);
  EXPECT_EQ(f->id(), 13u);
  EXPECT_EQ(f->ipus(), (std::vector<uint32_t>{4, 5, 6, 7}));
  // Everything is taken now.
  EXPECT_NX_ERROR(kDeviceUnavailable, m.attach(1, std::nullopt, 0), "busy");
  EXPECT_EQ(m.last_busy_ipus().size(), 8u);
  EXPECT_NX_ERROR(kDeviceUnavailable, m.attach(8, std::nullopt, 0), "IPU 0", "IPU 7");
}

TEST_F(DeviceTest, AttachRejectsBadCountsAndIds) {
  DeviceManager m(system(4), dir_);
  for (uint32_t n : {0u, 3u, 5u, 6u}) EXPECT_NX_ERROR(kInvalidArgument, m.attach(n, std::nullopt, 0), "power of two");
  EXPECT_NX_ERROR(kInvalidArgument, m.attach(8, std::nullopt, 0), "8", "4");
  EXPECT_NX_ERROR(kInvalidArgument, m.attach(1, 7, 0), "device_id 7");
  EXPECT_NX_ERROR(kInvalidArgument, m.attach(2, 0, 0), "device_id 0", "num_ipus=2");
  auto d = m.attach(2, 5, 0);  // ids: 0-3 singles, 4 {0,1}, 5 {2,3}, 6 {0..3}
  EXPECT_EQ(d->ipus(), (std::vector<uint32_t>{2, 3}));
  DeviceManager one(system(1), dir_);
  EXPECT_NX_ERROR(kInvalidArgument, one.attach(2, std::nullopt, 0), "asked for 2", "only 1");
}

TEST_F(DeviceTest, ExclusiveBetweenManagersInOneProcess) {
  DeviceManager m1(system(4), dir_), m2(system(4), dir_);
  auto held = m1.attach(2, std::nullopt, 0);  // IPUs 0 and 1
  ASSERT_EQ(held->ipus(), (std::vector<uint32_t>{0, 1}));
  const std::string me = std::to_string(getpid());
  EXPECT_NX_ERROR(kDeviceUnavailable, m2.attach(1, 0, 0), "device 0", "IPU 0", "pid " + me);
  EXPECT_EQ(m2.last_busy_ipus(), (std::vector<uint32_t>{0}));
  EXPECT_EQ(m2.last_busy_pids(), (std::vector<int32_t>{getpid()}));
  EXPECT_NX_ERROR(kDeviceUnavailable, m2.attach(4, std::nullopt, 0), "IPU 0", "IPU 1", "pid " + me);
  EXPECT_EQ(m2.last_busy_ipus(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(m2.last_busy_pids(), (std::vector<int32_t>{getpid(), getpid()}));
  // The manager that holds the IPUs is refused too: the lock is per open file.
  EXPECT_NX_ERROR(kDeviceUnavailable, m1.attach(1, 1, 0), "IPU 1");
  // Free IPUs are still there for the other manager.
  auto other = m2.attach(1, std::nullopt, 0);
  EXPECT_EQ(other->ipus(), (std::vector<uint32_t>{2}));
  EXPECT_EQ(m1.holder_pid(0), getpid());
  EXPECT_EQ(m1.holder_pid(1), getpid());
  EXPECT_EQ(m1.holder_pid(2), getpid());
  EXPECT_EQ(m1.holder_pid(3), 0);
  // A successful attach clears the record of the last failure.
  EXPECT_TRUE(m2.last_busy_ipus().empty());
}

TEST_F(DeviceTest, LockFileRecordsThePidWhileHeld) {
  DeviceManager m(system(2), dir_);
  auto d = m.attach(1, 1, 0);
  EXPECT_EQ(std::atoi(file_text(dir_ + "/ipu1.lock").c_str()), getpid());
  d->detach();
  EXPECT_EQ(file_text(dir_ + "/ipu1.lock"), "");
  EXPECT_EQ(m.holder_pid(1), 0);
}

TEST_F(DeviceTest, DetachTwiceIsSafeAndFreesTheIpus) {
  DeviceManager m1(system(2), dir_), m2(system(2), dir_);
  auto d = m1.attach(2, std::nullopt, 0);
  EXPECT_NX_ERROR(kDeviceUnavailable, m2.attach(1, std::nullopt, 0), "IPU 0", "IPU 1");
  d->detach();
  EXPECT_FALSE(d->attached());
  d->detach();
  EXPECT_FALSE(d->attached());
  auto again = m2.attach(2, std::nullopt, 0);
  EXPECT_TRUE(again->attached());
  // The detached device's destructor must not release the new holder's locks.
  d.reset();
  EXPECT_NX_ERROR(kDeviceUnavailable, m1.attach(1, 0, 0), "IPU 0");
}

TEST_F(DeviceTest, DestructorReleases) {
  DeviceManager m(system(1), dir_);
  {
    auto d = m.attach(1, 0, 0);
    EXPECT_EQ(m.holder_pid(0), getpid());
  }
  EXPECT_EQ(m.holder_pid(0), 0);
  EXPECT_NO_THROW(m.attach(1, 0, 0));
}

TEST_F(DeviceTest, WaitingGivesUpAfterTheTimeout) {
  DeviceManager m1(system(1), dir_), m2(system(1), dir_);
  auto held = m1.attach(1, 0, 0);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_NX_ERROR(kDeviceUnavailable, m2.attach(1, 0, 0.3), "gave up after waiting", "IPU 0");
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 1.5);
  // Without a timeout it fails at once.
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_NX_ERROR(kDeviceUnavailable, m2.attach(1, 0, 0), "IPU 0");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 0.2);
}

TEST_F(DeviceTest, WaitingSucceedsWhenTheHolderDetaches) {
  DeviceManager m1(system(1), dir_), m2(system(1), dir_);
  auto held = m1.attach(1, 0, 0);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held->detach();
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Device> d;
  EXPECT_NO_THROW(d = m2.attach(1, 0, 10.0));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  releaser.join();
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->attached());
  EXPECT_GE(waited, 0.15);
  EXPECT_LT(waited, 5.0);
}

TEST_F(DeviceTest, FreedIpuCanBeAttachedAgainRepeatedly) {
  DeviceManager m(system(2), dir_);
  for (int i = 0; i < 20; ++i) {
    auto d = m.attach(2, std::nullopt, 0);
    EXPECT_EQ(d->id(), 2u);
    d->detach();
  }
}

TEST_F(DeviceTest, LockDirectoryIsCreatedOnAttach) {
  const std::string nested = dir_ + "/a/b/c";
  DeviceManager m(system(1), nested);
  auto d = m.attach(1, 0, 0);
  struct stat st;
  EXPECT_EQ(stat((nested + "/ipu0.lock").c_str(), &st), 0);
}

TEST_F(DeviceTest, UnusableLockDirectoryIsAClearError) {
  const std::string file = dir_ + "/plain-file";
  { std::ofstream(file) << "x"; }
  DeviceManager m(system(1), file + "/locks");
  EXPECT_NX_ERROR(kInvalidArgument, m.attach(1, 0, 0), "NEURENIX_IPU_LOCK_DIR");
}

TEST_F(DeviceTest, DefaultLockDirectoryFollowsTheEnvironment) {
  const char* old_dir = std::getenv("NEURENIX_IPU_LOCK_DIR");
  const char* old_tmp = std::getenv("TMPDIR");
  std::string saved_dir = old_dir ? old_dir : "", saved_tmp = old_tmp ? old_tmp : "";
  setenv("NEURENIX_IPU_LOCK_DIR", dir_.c_str(), 1);
  EXPECT_EQ(default_lock_dir(), dir_);
  DeviceManager m(system(1), "");
  EXPECT_EQ(m.lock_dir(), dir_);
  unsetenv("NEURENIX_IPU_LOCK_DIR");
  setenv("TMPDIR", "/some/tmp", 1);
  EXPECT_EQ(default_lock_dir(), "/some/tmp/neurenix-ipu-locks");
  unsetenv("TMPDIR");
  EXPECT_EQ(default_lock_dir(), "/tmp/neurenix-ipu-locks");
  if (old_dir) setenv("NEURENIX_IPU_LOCK_DIR", saved_dir.c_str(), 1);
  if (old_tmp) setenv("TMPDIR", saved_tmp.c_str(), 1);
}

TEST_F(DeviceTest, BadSystemIsRejected) {
  SystemSpec s = system(2);
  s.num_ipus = 0;
  EXPECT_NX_ERROR(kInvalidArgument, DeviceManager(s, dir_), "num_ipus");
}

// The OS frees a dead holder's IPUs, however it dies: a child attaches, is
// killed with SIGKILL, and its IPU becomes free without any clean-up code.
TEST_F(DeviceTest, KilledHolderProcessFreesItsIpus) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    char ok = 'n';
    try {
      DeviceManager m(tiny(4, 2), dir_);
      auto d = m.attach(1, 1, 0);
      ok = 'y';
      if (write(ready[1], &ok, 1) != 1) _exit(2);
      d.release();  // never detach: only the kernel can free it
      while (true) pause();
    } catch (...) {
    }
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    _exit(1);
  }
  close(ready[1]);
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  close(ready[0]);
  ASSERT_EQ(ok, 'y');

  DeviceManager m(system(2), dir_);
  EXPECT_EQ(m.holder_pid(1), child);
  EXPECT_EQ(m.holder_pid(0), 0);
  EXPECT_NX_ERROR(kDeviceUnavailable, m.attach(1, 1, 0), "IPU 1", "pid " + std::to_string(child));
  EXPECT_EQ(m.last_busy_pids(), (std::vector<int32_t>{child}));
  EXPECT_NX_ERROR(kDeviceUnavailable, m.attach(2, std::nullopt, 0), "IPU 1");

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));

  EXPECT_EQ(m.holder_pid(1), 0);
  auto d = m.attach(2, std::nullopt, 0);
  EXPECT_EQ(d->ipus(), (std::vector<uint32_t>{0, 1}));
}

}  // namespace
