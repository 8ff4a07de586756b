build-dev/obj/termd/shellint.o: termd/shellint.c termd/termd.h \
 /usr/include/cjson/cJSON.h proto/proto.h proto/util.h termd/render.h \
 termd/output.h termd/pty.h proto/vtfilter.h proto/util.h proto/vtparse.h \
 termd/wsconn.h proto/vtparse.h build-dev/gen/termd.bash.inc \
 build-dev/gen/termd.sh.inc
termd/termd.h:
/usr/include/cjson/cJSON.h:
proto/proto.h:
proto/util.h:
termd/render.h:
termd/output.h:
termd/pty.h:
proto/vtfilter.h:
proto/util.h:
proto/vtparse.h:
termd/wsconn.h:
proto/vtparse.h:
build-dev/gen/termd.bash.inc:
build-dev/gen/termd.sh.inc:
