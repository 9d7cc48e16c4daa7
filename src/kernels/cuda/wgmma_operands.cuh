#pragma once

// The accumulator operands of the wgmma wrappers (fp8_gemm/wgmma_e4m3.cuh,
// attention/wgmma_bf16.cuh): an m64nN wgmma with an fp32 D holds N / 2 registers per thread, each
// one inline-asm operand. DI_WGMMA_D<n>(d) is the operand list "+f"(d[0]) .. "+f"(d[n - 1]) and
// DI_WGMMA_DREGS<n> the matching register list "{%0,%1,...,%<n - 1>}" of the instruction text;
// the operands after them are numbered from n.

#define DI_WGMMA_D8_AT(d, o)                                                                \
  "+f"(d[(o) + 0]), "+f"(d[(o) + 1]), "+f"(d[(o) + 2]), "+f"(d[(o) + 3]), "+f"(d[(o) + 4]), \
      "+f"(d[(o) + 5]), "+f"(d[(o) + 6]), "+f"(d[(o) + 7])
#define DI_WGMMA_D32_AT(d, o)                                                          \
  DI_WGMMA_D8_AT(d, (o) + 0), DI_WGMMA_D8_AT(d, (o) + 8), DI_WGMMA_D8_AT(d, (o) + 16), \
      DI_WGMMA_D8_AT(d, (o) + 24)
#define DI_WGMMA_D4(d) "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define DI_WGMMA_D8(d) DI_WGMMA_D8_AT(d, 0)
#define DI_WGMMA_D16(d) DI_WGMMA_D8_AT(d, 0), DI_WGMMA_D8_AT(d, 8)
#define DI_WGMMA_D32(d) DI_WGMMA_D32_AT(d, 0)
#define DI_WGMMA_D64(d) DI_WGMMA_D32_AT(d, 0), DI_WGMMA_D32_AT(d, 32)
#define DI_WGMMA_D128(d) \
  DI_WGMMA_D32_AT(d, 0), DI_WGMMA_D32_AT(d, 32), DI_WGMMA_D32_AT(d, 64), DI_WGMMA_D32_AT(d, 96)

#define DI_WGMMA_DREGS4 "{%0,%1,%2,%3}"
#define DI_WGMMA_DREGS8 "{%0,%1,%2,%3,%4,%5,%6,%7}"
#define DI_WGMMA_DREGS16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define DI_WGMMA_DREGS32                                                           \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21" \
  ",%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define DI_WGMMA_DREGS64                                                             \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21"   \
  ",%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41" \
  ",%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61" \
  ",%62,%63}"
#define DI_WGMMA_DREGS128                                                            \
  "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21"   \
  ",%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41" \
  ",%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61" \
  ",%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81" \
  ",%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100"    \
  ",%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116" \
  ",%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"
