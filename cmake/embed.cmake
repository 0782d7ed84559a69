# Turns file IN into a C source OUT defining
#   const unsigned char SYMBOL[]; const unsigned long SYMBOL_len;
# Used to embed openapi.yaml and the dashboard into hpod (one binary).
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE ${OUT} "/* generated from ${IN}; do not edit */\nconst unsigned char ${SYMBOL}[] = {\n${body}0x00};\nconst unsigned long ${SYMBOL}_len = ${len};\n")
