build-dev/obj/termd/main.o: termd/main.c termd/termd.h \
 /usr/include/cjson/cJSON.h proto/proto.h proto/util.h termd/render.h \
 termd/output.h termd/pty.h proto/vtfilter.h proto/util.h proto/vtparse.h \
 termd/wsconn.h proto/client.h
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
proto/client.h:
