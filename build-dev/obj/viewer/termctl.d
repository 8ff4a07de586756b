build-dev/obj/viewer/termctl.o: viewer/termctl.c proto/client.h \
 /usr/include/cjson/cJSON.h proto/proto.h
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/proto.h:
