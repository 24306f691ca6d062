// Throwaway single-thread experiment behind docs/benchmarks.md, "2026-12-05, third session"
// (not part of the build). clang++ -O2 -std=c++20 -mavx512f mb.cc -o mb && ./mb 256 1024
// (256-byte pieces, 1 MiB blocks, 768 MiB; modes: copy, digest then copy per block, one pass,
// digest alone, block k copied while block k + 1 is digested). The digest is span_digest.h's.
#include <immintrin.h>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <vector>
constexpr uint64_t kStep = 0x9E3779B97F4A7C15ull, kMul = 0xD6E8FEB86659FD93ull;
static inline uint64_t Mix(uint64_t x){x^=x>>32;x*=kMul;x^=x>>29;x*=kMul;x^=x>>32;return x;}
__attribute__((target("avx512f,avx512dq,avx512vl"))) uint64_t Dig(const uint8_t* p, uint64_t n, uint64_t first, uint64_t seed){
  uint64_t acc[4]={0,0,0,0}; uint64_t w=n/8;
  for(uint64_t i=0;i+4<=w;i+=4) for(int k=0;k<4;k++){uint64_t x; memcpy(&x,p+(i+k)*8,8); acc[k]+=Mix(x^(seed+(first+i+k+1)*kStep));}
  return acc[0]+acc[1]+acc[2]+acc[3];
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline __m512i Mix8(__m512i x, __m512i m){
  x=_mm512_xor_si512(x,_mm512_srli_epi64(x,32)); x=_mm512_mullo_epi64(x,m);
  x=_mm512_xor_si512(x,_mm512_srli_epi64(x,29)); x=_mm512_mullo_epi64(x,m);
  return _mm512_xor_si512(x,_mm512_srli_epi64(x,32));
}
// copy piece of `bytes` (multiple of 256) from src to dst with NT stores, digesting words numbered from first
__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline __m512i CopyDig(uint8_t* dst,const uint8_t* src,uint64_t bytes,uint64_t first,uint64_t seed,__m512i acc){
  const __m512i m=_mm512_set1_epi64(kMul);
  const __m512i lane=_mm512_set_epi64(8,7,6,5,4,3,2,1);
  __m512i k=_mm512_add_epi64(_mm512_set1_epi64(seed), _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64(first),lane),_mm512_set1_epi64(kStep)));
  const __m512i step=_mm512_set1_epi64(8*kStep);
  __m512i a1=_mm512_setzero_si512();
  for(uint64_t i=0;i<bytes;i+=128){
    __m512i x=_mm512_loadu_si512(src+i), y=_mm512_loadu_si512(src+i+64);
    _mm512_stream_si512((__m512i*)(dst+i),x); _mm512_stream_si512((__m512i*)(dst+i+64),y);
    __m512i k2=_mm512_add_epi64(k,step);
    acc=_mm512_add_epi64(acc,Mix8(_mm512_xor_si512(x,k),m));
    a1=_mm512_add_epi64(a1,Mix8(_mm512_xor_si512(y,k2),m));
    k=_mm512_add_epi64(k2,step);
  }
  return _mm512_add_epi64(acc,a1);
}
// copy piece from csrc to dst and digest dsrc (same length) words numbered from first
__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline __m512i CopyOtherDig(uint8_t* dst,const uint8_t* csrc,const uint8_t* dsrc,uint64_t bytes,uint64_t first,uint64_t seed,__m512i acc){
  const __m512i m=_mm512_set1_epi64(kMul);
  const __m512i lane=_mm512_set_epi64(8,7,6,5,4,3,2,1);
  __m512i k=_mm512_add_epi64(_mm512_set1_epi64(seed), _mm512_mullo_epi64(_mm512_add_epi64(_mm512_set1_epi64(first),lane),_mm512_set1_epi64(kStep)));
  const __m512i step=_mm512_set1_epi64(8*kStep);
  for(uint64_t i=0;i<bytes;i+=64){
    __m512i x=_mm512_loadu_si512(csrc+i); _mm512_stream_si512((__m512i*)(dst+i),x);
    __m512i y=_mm512_loadu_si512(dsrc+i);
    acc=_mm512_add_epi64(acc,Mix8(_mm512_xor_si512(y,k),m)); k=_mm512_add_epi64(k,step);
  }
  return acc;
}
__attribute__((target("avx512f,avx512dq,avx512vl"))) static inline void Copy(uint8_t* dst,const uint8_t* src,uint64_t bytes){
  for(uint64_t i=0;i<bytes;i+=128){__m512i x=_mm512_loadu_si512(src+i), y=_mm512_loadu_si512(src+i+64);
    _mm512_stream_si512((__m512i*)(dst+i),x); _mm512_stream_si512((__m512i*)(dst+i+64),y);}
}
int main(int argc,char**argv){
  const uint64_t N=768ull<<20, B=(argc>2?atoi(argv[2]):1024)<<10, P=atoi(argc>1?argv[1]:"256"), R=4096; // rows of 4096B
  uint8_t* src=(uint8_t*)aligned_alloc(4096,N); uint8_t* dst=(uint8_t*)aligned_alloc(4096,N);
  for(uint64_t i=0;i<N;i+=8){uint64_t v=i*0x9E37+7; memcpy(src+i,&v,8);} memset(dst,1,N);
  const uint64_t rows=N/R, per=R/P;
  auto dsto=[&](uint64_t off){uint64_t t=off/R, j=(off%R)/P; return (j*rows+t)*P;};
  volatile uint64_t sink=0;
  for(int rep=0;rep<3;rep++){
    for(int mode=0;mode<5;mode++){
      auto t0=std::chrono::steady_clock::now();
      uint64_t tot=0;
      for(uint64_t b=0;b<N;b+=B){
        if(mode==1||mode==3) tot+=Dig(src+b,B,0,7);
        if(mode==0||mode==1) for(uint64_t o=b;o<b+B;o+=P) Copy(dst+dsto(o),src+o,P);
        if(mode==4){ if(b==0) tot+=Dig(src,B,0,7); __m512i acc=_mm512_setzero_si512();
          if(b+B<N){ for(uint64_t o=b;o<b+B;o+=P) acc=CopyOtherDig(dst+dsto(o),src+o,src+o+B,P,(o-b)/8,7,acc); tot+=_mm512_reduce_add_epi64(acc);} 
          else for(uint64_t o=b;o<b+B;o+=P) Copy(dst+dsto(o),src+o,P); }
        if(mode==2){ __m512i acc=_mm512_setzero_si512(); for(uint64_t o=b;o<b+B;o+=P) acc=CopyDig(dst+dsto(o),src+o,P,(o-b)/8,7,acc); tot+=_mm512_reduce_add_epi64(acc);} 
      }
      _mm_sfence();
      double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
      sink+=tot;
      printf("rep %d %-14s %.3f s %.2f GB/s\n",rep,(const char*[]){"copy","digest+copy","fused","digest only","pipelined"}[mode],s,N/s/1e9);
    }
  }
  // check fused digest equals Dig
  __m512i acc=_mm512_setzero_si512(); for(uint64_t o=0;o<B;o+=P) acc=CopyDig(dst+dsto(o),src+o,P,o/8,7,acc);
  printf("equal %d\n",(int)(_mm512_reduce_add_epi64(acc)==(long long)Dig(src,B,0,7)));
}
