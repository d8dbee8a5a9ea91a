#include "trace/safe_unpickler.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "common/error.h"

namespace stalloc {
namespace {

// Generated once with CPython 3.11's pickle from
//   shared = [1]; rec = []; rec.append(rec)
//   {'ints': [0, 1, -2, 300, 70000, -70000, 2**40, -2**63, 2**63-1], 'float': 1.5, 't': True,
//    'f': False, 'none': None, 'str': 'h\u00e9llo', 'bytes': b'\x00\xff',
//    'tuples': [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)], 'set': {5}, 'frozen': frozenset([6]),
//    'p': shared, 'q': shared, 'rec': rec}
// leaving out what a protocol can only express with a global (bytes before 3, sets before 4)
// and, for protocols 0 and 1, also 'str', 'set' and 'frozen'.
const std::string kPlainProtocol2 = std::string("\200\002}q\000(X\004\000\000\000intsq\001]q\002(K\000K\001J\376\377\377\377M,\001Jp\021"
    "\001\000J\220\356\376\377\212\006\000\000\000\000\000\001\212\010\000\000\000\000\000\000"
    "\000\200\212\010\377\377\377\377\377\377\377\177eX\005\000\000\000floatq\003G\077\370\000"
    "\000\000\000\000\000X\001\000\000\000tq\004\210X\001\000\000\000fq\005\211X\004\000\000"
    "\000noneq\006NX\003\000\000\000strq\007X\006\000\000\000h\303\251lloq\010X\006\000\000\000"
    "tuplesq\011]q\012()K\001\205q\013K\001K\002\206q\014K\001K\002K\003\207q\015(K\001K\002K"
    "\003K\004tq\016eX\001\000\000\000pq\017]q\020K\001aX\001\000\000\000qq\021h\020X\003\000"
    "\000\000recq\022]q\023h\023au.", 240);
const std::string kPlainProtocol3 = std::string("\200\003}q\000(X\004\000\000\000intsq\001]q\002(K\000K\001J\376\377\377\377M,\001Jp\021"
    "\001\000J\220\356\376\377\212\006\000\000\000\000\000\001\212\010\000\000\000\000\000\000"
    "\000\200\212\010\377\377\377\377\377\377\377\177eX\005\000\000\000floatq\003G\077\370\000"
    "\000\000\000\000\000X\001\000\000\000tq\004\210X\001\000\000\000fq\005\211X\004\000\000"
    "\000noneq\006NX\003\000\000\000strq\007X\006\000\000\000h\303\251lloq\010X\005\000\000\000"
    "bytesq\011C\002\000\377q\012X\006\000\000\000tuplesq\013]q\014()K\001\205q\015K\001K\002"
    "\206q\016K\001K\002K\003\207q\017(K\001K\002K\003K\004tq\020eX\001\000\000\000pq\021]q\022"
    "K\001aX\001\000\000\000qq\023h\022X\003\000\000\000recq\024]q\025h\025au.", 258);
const std::string kPlainProtocol4 = std::string("\200\004\225\340\000\000\000\000\000\000\000}\224(\214\004ints\224]\224(K\000K\001J\376"
    "\377\377\377M,\001Jp\021\001\000J\220\356\376\377\212\006\000\000\000\000\000\001\212\010"
    "\000\000\000\000\000\000\000\200\212\010\377\377\377\377\377\377\377\177e\214\005float\224"
    "G\077\370\000\000\000\000\000\000\214\001t\224\210\214\001f\224\211\214\004none\224N\214"
    "\003str\224\214\006h\303\251llo\224\214\005bytes\224C\002\000\377\224\214\006tuples\224]"
    "\224()K\001\205\224K\001K\002\206\224K\001K\002K\003\207\224(K\001K\002K\003K\004t\224e"
    "\214\003set\224\217\224(K\005\220\214\006frozen\224(K\006\221\224\214\001p\224]\224K\001a"
    "\214\001q\224h\026\214\003rec\224]\224h\031au.", 235);
const std::string kPlainProtocol5 = std::string("\200\005\225\340\000\000\000\000\000\000\000}\224(\214\004ints\224]\224(K\000K\001J\376"
    "\377\377\377M,\001Jp\021\001\000J\220\356\376\377\212\006\000\000\000\000\000\001\212\010"
    "\000\000\000\000\000\000\000\200\212\010\377\377\377\377\377\377\377\177e\214\005float\224"
    "G\077\370\000\000\000\000\000\000\214\001t\224\210\214\001f\224\211\214\004none\224N\214"
    "\003str\224\214\006h\303\251llo\224\214\005bytes\224C\002\000\377\224\214\006tuples\224]"
    "\224()K\001\205\224K\001K\002\206\224K\001K\002K\003\207\224(K\001K\002K\003K\004t\224e"
    "\214\003set\224\217\224(K\005\220\214\006frozen\224(K\006\221\224\214\001p\224]\224K\001a"
    "\214\001q\224h\026\214\003rec\224]\224h\031au.", 235);
const std::string kPlainProtocol0 = std::string("(dp0\012Vints\012p1\012(lp2\012I0\012aI1\012aI-2\012aI300\012aI70000\012aI-70000\012aL1099"
    "511627776L\012aL-9223372036854775808L\012aL9223372036854775807L\012asVfloat\012p3\012F1.5"
    "\012sVt\012p4\012I01\012sVf\012p5\012I00\012sVnone\012p6\012NsVtuples\012p7\012(lp8\012(ta"
    "(I1\012tp9\012a(I1\012I2\012tp10\012a(I1\012I2\012I3\012tp11\012a(I1\012I2\012I3\012I4\012"
    "tp12\012asVp\012p13\012(lp14\012I1\012asVq\012p15\012g14\012sVrec\012p16\012(lp17\012g17"
    "\012as.", 298);
const std::string kPlainProtocol1 = std::string("}q\000(X\004\000\000\000intsq\001]q\002(K\000K\001J\376\377\377\377M,\001Jp\021\001\000J"
    "\220\356\376\377L1099511627776L\012L-9223372036854775808L\012L9223372036854775807L\012eX"
    "\005\000\000\000floatq\003G\077\370\000\000\000\000\000\000X\001\000\000\000tq\004I01\012X"
    "\001\000\000\000fq\005I00\012X\004\000\000\000noneq\006NX\006\000\000\000tuplesq\007]q\010"
    "()(K\001tq\011(K\001K\002tq\012(K\001K\002K\003tq\013(K\001K\002K\003K\004tq\014eX\001\000"
    "\000\000pq\015]q\016K\001aX\001\000\000\000qq\017h\016X\003\000\000\000recq\020]q\021h\021"
    "au.", 257);
// collections.OrderedDict(a=1), protocol 2: GLOBAL + REDUCE.
const std::string kGlobalReduce = std::string("\200\002ccollections\012OrderedDict\012q\000)Rq\001X\001\000\000\000aq\002K\001s.", 45);
// {'x': E()} where E.__reduce__ returns (eval, ("1",)), protocol 4: STACK_GLOBAL + REDUCE.
const std::string kEvalReduce = std::string("\200\004\225$\000\000\000\000\000\000\000}\224\214\001x\224\214\010builtins\224\214\004eva"
    "l\224\223\224\214\0011\224\205\224R\224s.", 47);
// 2**64, protocol 2: LONG1 with 9 bytes (a BigInt).
const std::string kBigInt = std::string("\200\002\212\011\000\000\000\000\000\000\000\000\001.", 14);

const PickleValue& at(const PickleValue& dict, const char* key) {
  const PickleValue* v = dict.find(key);
  EXPECT_NE(v, nullptr) << key;
  static const PickleValue none;
  return v ? *v : none;
}

void expect_plain(const PickleValue& root, bool with_str, bool with_bytes, bool with_sets) {
  ASSERT_EQ(root.kind, PickleValue::Kind::Dict);
  const PickleValue& ints = at(root, "ints");
  ASSERT_EQ(ints.kind, PickleValue::Kind::List);
  const std::int64_t want[] = {0, 1, -2, 300, 70000, -70000, std::int64_t{1} << 40,
                               std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
  ASSERT_EQ(ints.items.size(), std::size(want));
  for (std::size_t i = 0; i < std::size(want); ++i) {
    EXPECT_EQ(ints.items[i]->kind, PickleValue::Kind::Int) << i;
    EXPECT_EQ(ints.items[i]->integer, want[i]) << i;
  }
  EXPECT_EQ(at(root, "float").kind, PickleValue::Kind::Float);
  EXPECT_EQ(at(root, "float").real, 1.5);
  EXPECT_EQ(at(root, "t").kind, PickleValue::Kind::Bool);
  EXPECT_TRUE(at(root, "t").boolean);
  EXPECT_FALSE(at(root, "f").boolean);
  EXPECT_TRUE(at(root, "t").is_int());
  EXPECT_EQ(at(root, "t").as_int(), 1);
  EXPECT_EQ(at(root, "none").kind, PickleValue::Kind::None);
  if (with_str) {
    EXPECT_EQ(at(root, "str").kind, PickleValue::Kind::Str);
    EXPECT_EQ(at(root, "str").text, "h\xc3\xa9llo");
  }
  if (with_bytes) {
    EXPECT_EQ(at(root, "bytes").kind, PickleValue::Kind::Bytes);
    EXPECT_EQ(at(root, "bytes").text, std::string("\0\xff", 2));
  }
  const PickleValue& tuples = at(root, "tuples");
  ASSERT_EQ(tuples.items.size(), 5u);
  for (std::size_t n = 0; n < 5; ++n) {
    const PickleValue& t = *tuples.items[n];
    EXPECT_EQ(t.kind, PickleValue::Kind::Tuple);
    ASSERT_EQ(t.items.size(), n);
    for (std::size_t k = 0; k < n; ++k) EXPECT_EQ(t.items[k]->integer, static_cast<std::int64_t>(k + 1));
  }
  if (with_sets) {
    EXPECT_EQ(at(root, "set").kind, PickleValue::Kind::Set);
    ASSERT_EQ(at(root, "set").items.size(), 1u);
    EXPECT_EQ(at(root, "set").items[0]->integer, 5);
    ASSERT_EQ(at(root, "frozen").items.size(), 1u);
    EXPECT_EQ(at(root, "frozen").items[0]->integer, 6);
  }
  // The memo makes a shared object one value, and a list can contain itself.
  EXPECT_EQ(&at(root, "p"), &at(root, "q"));
  const PickleValue& rec = at(root, "rec");
  ASSERT_EQ(rec.items.size(), 1u);
  EXPECT_EQ(rec.items[0], &rec);
}

std::string error_of(const std::string& bytes) {
  try {
    unpickle(bytes, "x.pickle");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(SafeUnpickler, ReadsPlainDataInEveryProtocol) {
  expect_plain(unpickle(kPlainProtocol0, "p0").root(), false, false, false);
  expect_plain(unpickle(kPlainProtocol1, "p1").root(), false, false, false);
  expect_plain(unpickle(kPlainProtocol2, "p2").root(), true, false, false);
  expect_plain(unpickle(kPlainProtocol3, "p3").root(), true, true, false);
  expect_plain(unpickle(kPlainProtocol4, "p4").root(), true, true, true);
  expect_plain(unpickle(kPlainProtocol5, "p5").root(), true, true, true);
}

TEST(SafeUnpickler, RefusesGlobalsAndReduce) {
  std::string e = error_of(kGlobalReduce);
  EXPECT_NE(e.find("pickle references a class or global (GLOBAL collections.OrderedDict)"), std::string::npos) << e;
  EXPECT_NE(e.find("refusing to load untrusted pickle"), std::string::npos);
  e = error_of(kEvalReduce);
  EXPECT_NE(e.find("(STACK_GLOBAL builtins.eval): refusing to load untrusted pickle"), std::string::npos) << e;
  // Every object-building opcode is refused on its own, even without a global before it.
  for (char op : {'R', 'b', 'i', 'o', 'P', 'Q', '\x81', '\x82', '\x83', '\x84', '\x92'}) {
    EXPECT_NE(error_of(std::string("\x80\x02N") + op).find("refusing to load untrusted pickle"), std::string::npos)
        << static_cast<int>(static_cast<unsigned char>(op));
  }
}

// Ints wider than int64 load as BigInt, whatever opcode spells them; the reader of a field decides.
TEST(SafeUnpickler, ReadsIntsOfAnyWidth) {
  struct Case {
    std::string pickle;
    PickleValue::Kind kind;
    std::string decimal;
    bool fits_uint64;
  };
  const Case cases[] = {
      {kBigInt, PickleValue::Kind::BigInt, "18446744073709551616", false},
      // 2**64-1 (a frame line number seen in real snapshots): LONG1 of 9 bytes.
      {std::string("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00.", 14), PickleValue::Kind::BigInt,
       "18446744073709551615", true},
      {std::string("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x80\x00.", 14), PickleValue::Kind::BigInt,
       "9223372036854775808", true},
      {std::string("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xff.", 14), PickleValue::Kind::BigInt,
       "-18446744073709551616", false},
      {std::string("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff.", 14), PickleValue::Kind::BigInt,
       "-9223372036854775809", false},
      // 10**40 in LONG1, and in the text forms of protocol 0 (LONG, INT).
      {std::string("\x80\x02\x8a\x11\x00\x00\x00\x00\x00\x61\xf5\xb9\xab\xbf\xa4\x5c\xc3\xf1\x29\x63\x1d.", 22),
       PickleValue::Kind::BigInt, "10000000000000000000000000000000000000000", false},
      {"L18446744073709551615L\n.", PickleValue::Kind::BigInt, "18446744073709551615", true},
      {"I-00018446744073709551616\n.", PickleValue::Kind::BigInt, "-18446744073709551616", false},
      // A non-minimal encoding of 1 (nine bytes) is still an Int.
      {std::string("\x80\x02\x8a\x09\x01\x00\x00\x00\x00\x00\x00\x00\x00.", 14), PickleValue::Kind::Int, "1", true},
      {std::string("\x80\x02\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff.", 14), PickleValue::Kind::Int, "-1", false},
  };
  for (const Case& c : cases) {
    PickleDocument doc = unpickle(c.pickle, "big.pickle");
    const PickleValue& v = doc.root();
    EXPECT_EQ(v.kind, c.kind) << c.decimal;
    EXPECT_TRUE(v.is_integer()) << c.decimal;
    EXPECT_EQ(v.is_int(), c.kind == PickleValue::Kind::Int) << c.decimal;
    EXPECT_EQ(v.decimal(), c.decimal);
    std::uint64_t u = 0;
    EXPECT_EQ(v.to_uint64(&u), c.fits_uint64) << c.decimal;
    if (c.fits_uint64) {
      EXPECT_EQ(std::to_string(u), c.decimal);
    }
    if (c.kind == PickleValue::Kind::BigInt) {
      EXPECT_EQ(v.integer, c.decimal[0] == '-' ? std::numeric_limits<std::int64_t>::min()
                                                : std::numeric_limits<std::int64_t>::max());
    }
  }
  // Too wide to spell out: a placeholder, and no uint64.
  std::string wide = "\x80\x02\x8b";
  wide += std::string("\x00\x01\x00\x00", 4);  // LONG4 length 256
  wide += std::string(255, '\x01') + '\x01' + ".";
  PickleDocument doc = unpickle(wide, "wide.pickle");
  EXPECT_EQ(doc.root().kind, PickleValue::Kind::BigInt);
  EXPECT_EQ(doc.root().decimal(), "<integer of 256 bytes>");
  std::uint64_t u = 0;
  EXPECT_FALSE(doc.root().to_uint64(&u));
  EXPECT_FALSE(unpickle("N.", "n").root().is_integer());
  EXPECT_EQ(unpickle("N.", "n").root().decimal(), "");
}

TEST(SafeUnpickler, RejectsMalformedInput) {
  EXPECT_NE(error_of("I12x\n.").find("expected INT value as a decimal integer"), std::string::npos);
  EXPECT_NE(error_of("L-L\n.").find("expected LONG value as a decimal integer"), std::string::npos);
  EXPECT_NE(error_of("").find("x.pickle: byte offset 0: expected an opcode"), std::string::npos);
  EXPECT_NE(error_of("\x80\x09N.").find("protocol 0 to 5"), std::string::npos);
  EXPECT_NE(error_of("\x80\x04\xff").find("got byte 0xff"), std::string::npos);
  EXPECT_NE(error_of("\x80\x04h\x05.").find("memo entry 5"), std::string::npos);
  EXPECT_NE(error_of("\x80\x04(.").find("byte offset 3"), std::string::npos);  // STOP with an open mark
  EXPECT_NE(error_of("\x80\x04N(a.").find("APPEND"), std::string::npos);  // APPEND cannot reach below a MARK
  EXPECT_NE(error_of("\x80\x04NNNs.").find("expected a dict for SETITEM"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04X\xff\xff\xff\x7f", 7)).find("end of data"), std::string::npos);
  EXPECT_NE(error_of(std::string("\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xff", 11)).find("end of data"),
            std::string::npos);
  EXPECT_NE(error_of("\x80\x04NN.").find("empty stack"), std::string::npos);
  // Every prefix of a valid pickle fails cleanly.
  for (std::size_t n = 0; n < kPlainProtocol4.size(); ++n) {
    EXPECT_THROW(unpickle(kPlainProtocol4.substr(0, n), "p"), ParseError) << n;
  }
}

TEST(SafeUnpickler, DeepNestingDoesNotRecurse) {
  // 200000 nested lists: '(' ']' pairs then APPENDs, built iteratively.
  std::string p = "\x80\x04]";
  for (int i = 0; i < 200000; ++i) p += "]";
  for (int i = 0; i < 200000; ++i) p += "a";
  p += ".";
  PickleDocument doc = unpickle(p, "deep");
  const PickleValue& root = doc.root();
  EXPECT_EQ(root.kind, PickleValue::Kind::List);
  EXPECT_EQ(root.items.size(), 1u);
}

}  // namespace
}  // namespace stalloc
