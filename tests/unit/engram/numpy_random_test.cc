#include "engram/numpy_random.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <vector>

#include "common/error.h"

namespace di {
namespace {

// Every expected value below was produced with numpy 2.4.6 (np.random.SeedSequence,
// np.random.default_rng(seed).bit_generator.state, .integers(low, high, size=n, dtype=np.int64)).

// ((2^63 - 1) // 99092) // 2: the release model's multiplier bound (delta spec §2.3).
constexpr int64_t kReleaseBound = 46539438283891;

struct SeedCase {
  uint64_t seed;
  std::array<uint32_t, 4> pool;
  std::array<uint64_t, 4> state_words;  // generate_state(4, np.uint64)
  std::array<uint64_t, 2> pcg_state;    // (high, low) after seeding
  std::array<uint64_t, 2> pcg_inc;
};

const std::vector<SeedCase>& seed_cases() {
  static const std::vector<SeedCase> cases = {
      {10007,
       {0xf1a1018du, 0xa7c60c02u, 0xfd15d50au, 0x3b81232u},
       {0x77d32a348ad70d07ull, 0x993ed609b84a4fa5ull, 0xd5f972dec8698e49ull, 0x7d79ebaebcf148deull},
       {0x3b34af7676e8ddd5ull, 0x556a026c98a77d27ull},
       {0xabf2e5bd90d31c92ull, 0xfaf3d75d79e291bdull}},
      {10007 * 14,
       {0x7097f09fu, 0xc71373b7u, 0x148492afu, 0x9681c6c4u},
       {0xdb5869feeeccf2beull, 0xad465727d9cf3645ull, 0x5155d26378b6bab4ull, 0x9f9e49df66ff1c85ull},
       {0x81481950b65ad0cull, 0x830c0440d514199bull},
       {0xa2aba4c6f16d7569ull, 0x3f3c93becdfe390bull}},
      {0,
       {0xfe40eb07u, 0x4f363a36u, 0x4eb2009du, 0xc89a7aa7u},
       {0xdb2cd7e7b0f478beull, 0xabf4641a2c71ba49ull, 0x20c6ed6d9d7b8d41ull, 0x2c4099de223c39d4ull},
       {0x1aa1b5345996452dull, 0x9585eb7a69561e3ull},
       {0x418ddadb3af71a82ull, 0x588133bc447873a9ull}},
      {1,
       {0xa137e185u, 0xde2fab1u, 0x950eae78u, 0x54dd0a81u},
       {0x672d8ee56d6791ffull, 0x8ae19ca14eb1072cull, 0x4915796d1322fc4aull, 0xd0cc2bdcaba049bdull},
       {0x9c5b484bfedb756cull, 0x2a6e7d6f320fbc7eull},
       {0x922af2da2645f895ull, 0xa19857b95740937bull}},
      // Two 32-bit entropy words: exercises the multi-word seed coercion.
      {(uint64_t{1} << 40) + 3,
       {0xad49605fu, 0xed3b1e5au, 0x6fe13cecu, 0x4322395au},
       {0x5418c9b7a64674f4ull, 0x6b87af38305bb452ull, 0x67a779a86253d291ull, 0x35c14f1ed476091full},
       {0x46b9e1f7d584d9b4ull, 0xb5ec56f67c9fed54ull},
       {0xcf4ef350c4a7a522ull, 0x6b829e3da8ec123full}},
  };
  return cases;
}

TEST(NumpySeedSequence, PoolAndStateMatchNumpy) {
  for (const SeedCase& c : seed_cases()) {
    SCOPED_TRACE(c.seed);
    NumpySeedSequence ss(c.seed);
    EXPECT_EQ(ss.pool(), c.pool);
    std::vector<uint64_t> words = ss.generate_state_u64(4);
    EXPECT_EQ(words, std::vector<uint64_t>(c.state_words.begin(), c.state_words.end()));
  }
}

TEST(NumpyPcg64, SeededStateMatchesNumpy) {
  for (const SeedCase& c : seed_cases()) {
    SCOPED_TRACE(c.seed);
    NumpyPcg64 gen(c.seed);
    EXPECT_EQ(gen.state(), c.pcg_state);
    EXPECT_EQ(gen.increment(), c.pcg_inc);
  }
}

TEST(NumpyPcg64, RawOutputsAndHalfWordBuffering) {
  // np.random.PCG64(10007).random_raw(3)
  NumpyPcg64 a(10007);
  EXPECT_EQ(a.next_uint64(), 0xd2c3f84026661e33ull);
  EXPECT_EQ(a.next_uint64(), 0x0d4fb6969eb57435ull);
  EXPECT_EQ(a.next_uint64(), 0x62e6e1c58c3bd72bull);
  // 32-bit draws take the low half of a 64-bit output first, then its high half.
  NumpyPcg64 b(10007);
  EXPECT_EQ(b.next_uint32(), 0x26661e33u);
  EXPECT_EQ(b.next_uint32(), 0xd2c3f840u);
  EXPECT_EQ(b.next_uint32(), 0x9eb57435u);
}

struct IntegersCase {
  uint64_t seed;
  int64_t low;
  int64_t high;
  std::vector<int64_t> expected;
};

TEST(NumpyPcg64Integers, MatchesNumpyDefaultRng) {
  const std::vector<IntegersCase> cases = {
      // The seeds of layers 1 and 14, plus edge seeds, at a small range (32-bit Lemire path),
      // the release bound and 2^62 (64-bit Lemire path).
      {10007, 0, 1000, {149, 823, 619, 51, 547, 386, 299, 794}},
      {10007,
       0,
       kReleaseBound,
       {38316048023122, 2419938046656, 17979836159674, 36993668729195, 19978571768672,
        35201700093836, 10352428609326, 1049075516543}},
      {10007,
       0,
       int64_t{1} << 62,
       {3796813830707316620, 239796500919311629, 1781657924734481866, 3665776621713512656,
        1979716633701278750, 3488206865698518458, 1025842855755418169, 103954991085286065}},
      {10007 * 14, 0, 1000, {808, 727, 63, 553, 466, 332, 736, 887}},
      {10007 * 14,
       0,
       kReleaseBound,
       {33858405369630, 25755403400457, 15460673601360, 41309613242795, 25183878979268,
        18758584732570, 37146496813118, 37083303056293}},
      {10007 * 14,
       0,
       int64_t{1} << 62,
       {3355097104887443524, 2552154433758184159, 1532029068506037380, 4093452195455176999,
        2495520935813751150, 1858825678319892155, 3680920662205559597, 3674658666454283357}},
      {0, 0, 1000, {850, 636, 511, 269, 307, 40, 75, 16}},
      {0,
       0,
       kReleaseBound,
       {29643839136299, 12555722115027, 1906884788502, 769186873658, 37849140105386, 42479131856993,
        28232488247117, 33950360178225}},
      {0,
       0,
       int64_t{1} << 62,
       {2937467307694268567, 1244171615822312904, 188957027462249006, 76220265684581383,
        3750546991322993742, 4209342133973288723, 2797613725383355551, 3364209090780767889}},
      {1, 0, 1000, {473, 511, 755, 950, 34, 144, 822, 948}},
      {1,
       0,
       kReleaseBound,
       {23819890915098, 44234046536239, 6709107399195, 44149612398091, 14512460615818,
        19701375145897, 38520813782522, 19043897952874}},
      {1,
       0,
       int64_t{1} << 62,
       {2360360630558964031, 4383240139369130521, 664818870401041971, 4374873391751699444,
        1438068747342666922, 1952248665957342226, 3817104479337814857, 1887097935946223282}},
      {(uint64_t{1} << 40) + 3, 0, 1000, {733, 773, 444, 995, 380, 473, 336, 64}},
      {(uint64_t{1} << 40) + 3,
       0,
       kReleaseBound,
       {36005519624138, 46346643085434, 22021480893447, 3018114778801, 9105529047165,
        26329483489505, 30978799833060, 26127483870764}},
      {(uint64_t{1} << 40) + 3,
       0,
       int64_t{1} << 62,
       {3567858950595158475, 4592581556621908176, 2182152584693574434, 299071029661050192,
        902285084341709683, 2609041177942102391, 3069751233057683149, 2589024631721858331}},
      // Range exactly 2^32: numpy returns raw 32-bit draws, no Lemire step.
      {10007,
       0,
       int64_t{1} << 32,
       {644226611, 3536058432, 2662691893, 223327894, 2352731947, 1659298245, 1286169411,
        3414020521}},
      // Range 2^32 + 1: the first range that takes 64-bit draws.
      {10007,
       0,
       (int64_t{1} << 32) + 1,
       {3536058432, 223327894, 1659298245, 3414020522, 1843754792, 3248645799, 955390609,
        96815629}},
      {1, 0, 7, {3, 3, 5, 6, 0, 1, 5, 6, 1}},
      {0,
       0,
       INT64_MAX,
       {5874934615388537134, 2488343231644625808, 377914054924498011, 152440531369162766,
        7501093982645987484, 8418684267946577446}},
      {5, -10, 10, {3, 6, -10, 6, -1, 0, 2}},
      // 3 * 2^30: a quarter of 32-bit draws is rejected, exercising the rejection loop.
      {2,
       0,
       int64_t{3} << 30,
       {2698019472, 961507274, 1332987094, 2622804695, 1453642749, 296081973, 1078733727,
        1933059099, 2619466062, 2346857726, 3198221388, 2835412727, 1798171473, 885738331,
        648599384, 2117739973}},
      // Range 3 * 2^62: a quarter of 64-bit draws is rejected.
      {3,
       INT64_MIN,
       int64_t{1} << 62,
       {-5947084929996955913, 1862306707490894120, -7921096806793966774, -3231035673376432443,
        -2595669515618052247, -7013374879163031848, 939545498975503973, -7650713041980968769,
        -3810707308484301323, -2074241610791100431, -1104979734251459613, 984656585713193207,
        4006640950167951818, 408816696092958319, -5173563480281337143, -9202756645002808304}},
      // A single-value range consumes nothing and returns low.
      {4, 41, 42, {41, 41, 41}},
  };
  for (const IntegersCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "seed " << c.seed << " [" << c.low << ", " << c.high << ")");
    EXPECT_EQ(numpy_pcg64_integers(c.seed, c.low, c.high, c.expected.size()), c.expected);
  }
}

TEST(NumpyPcg64Integers, PrefixOfALongerDrawIsTheShorterDraw) {
  // numpy fills `size` values from one stream, so size=n is a prefix of size=n+k.
  std::vector<int64_t> longer = numpy_pcg64_integers(10007, 0, kReleaseBound, 4);
  std::vector<int64_t> shorter = numpy_pcg64_integers(10007, 0, kReleaseBound, 2);
  EXPECT_EQ(shorter, std::vector<int64_t>(longer.begin(), longer.begin() + 2));
}

TEST(NumpyPcg64Integers, RejectsEmptyRange) {
  EXPECT_THROW(numpy_pcg64_integers(1, 5, 5, 1), Error);
}

}  // namespace
}  // namespace di
